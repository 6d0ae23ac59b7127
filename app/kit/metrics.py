"""The portal's metrics in Prometheus' text format (docs/operator.md#metrics).

What a process records, wherever it happens (a reconcile's outcome, a breaker, a helm install),
lives in prometheus_client's default registry; a web app's requests in a registry of its own
(``HttpMetrics``), so that apps made side by side in one process (tests) count apart.

``portal serve --workers N`` sets ``PROMETHEUS_MULTIPROC_DIR`` before its serving processes
start: each one then writes its values to files there, and any of them answers for all
(``exposition``).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
# The text format every Prometheus reads (its names are all plain ASCII).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# A request: most answer in milliseconds; the slow ones (a kubeconfig, a page of many rows)
# in a second or more.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A reconcile or a helm install: from a read that changes nothing to a chart that installs.
SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

RECONCILES = Counter(
    "portal_reconcile", "reconciles ended, by kind and outcome (success, retry, terminal, "
    "host_unreachable, deferred, bug)", ["kind", "outcome"])
RECONCILE_SECONDS = Histogram(
    "portal_reconcile_duration_seconds", "how long a reconcile took, by kind", ["kind"],
    buckets=SLOW_BUCKETS)
BREAKER_OPEN = Gauge(
    "portal_host_breaker_open", "1 while the worker's breaker for a host cluster is open "
    "(the host unreachable), else 0", ["host"], multiprocess_mode="max")
HELM_INSTALL_SECONDS = Histogram(
    "portal_helm_install_duration_seconds", "how long a helm install or upgrade of a "
    "virtual cluster or add-on took, by host cluster", ["host"], buckets=SLOW_BUCKETS)

# What became of notification deliveries: each attempt's result (delivered, retry, failed)
# and those given up unsent (dropped at fan-out, the destination's queue full; expired).
NOTIFICATION_CHANNELS = ("email", "webhook")
NOTIFICATION_OUTCOMES = ("delivered", "retry", "failed", "dropped", "expired")
NOTIFICATIONS = Counter(
    "portal_notifications", "notification deliveries by channel (email, webhook) and outcome: "
    "delivered, retry (an attempt to try again), failed (for good), dropped (the "
    "destination's queue full), expired (not delivered in time)", ["channel", "outcome"])
for _channel in NOTIFICATION_CHANNELS:
    for _outcome in NOTIFICATION_OUTCOMES:
        NOTIFICATIONS.labels(_channel, _outcome)  # every series from 0: rate() sees the first


def count_notifications(channel: str, outcome: str, amount: int = 1) -> None:
    if amount > 0 and channel in NOTIFICATION_CHANNELS and outcome in NOTIFICATION_OUTCOMES:
        NOTIFICATIONS.labels(channel, outcome).inc(amount)


@functools.cache
def worker_last_pass() -> Gauge:
    """Made by a worker's first pass: a web process never shows a last pass of 0, which an
    alert on the worker's silence would read as a worker stopped since 1970."""
    return Gauge("portal_worker_last_pass_timestamp_seconds",
                 "unix time of the worker's last completed pass over the queue",
                 multiprocess_mode="max")


class HttpMetrics:
    """One web app's requests: a count by route template, method and status, and a latency
    histogram by route template and method. The labelled children are kept by their labels,
    so a request costs a dictionary lookup and the two increments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "portal_http_requests", "requests answered, by route template (unmatched: no "
            "route), method and status", ["route", "method", "status"], registry=self.registry)
        self.seconds = Histogram(
            "portal_http_request_duration_seconds", "time from a request's arrival to the "
            "end of its answer, by route template and method", ["route", "method"],
            registry=self.registry, buckets=REQUEST_BUCKETS)
        self._counts: dict[tuple[str, str, int], Counter] = {}
        self._times: dict[tuple[str, str], Histogram] = {}

    def record(self, route: str, method: str, status: int, seconds: float) -> None:
        count = self._counts.get((route, method, status))
        if count is None:
            count = self._counts.setdefault(
                (route, method, status), self.requests.labels(route, method, str(status)))
        count.inc()
        timed = self._times.get((route, method))
        if timed is None:
            timed = self._times.setdefault(
                (route, method), self.seconds.labels(route, method))
        timed.observe(seconds)


def exposition(*registries: CollectorRegistry, default: bool = True) -> bytes:
    """``registries``' metrics and, with ``default``, the process's (its reconciles, breakers,
    helm installs: ``portal dev`` serves those on the worker's address only, its web app's
    requests on the web's); under ``--workers N`` every serving process's, merged from their
    files."""
    if os.environ.get(MULTIPROCESS_ENV):
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        return generate_latest(merged)
    served = (*registries, REGISTRY) if default else registries
    return b"".join(generate_latest(registry) for registry in served)


def registry_of(*collectors: Collector) -> CollectorRegistry:
    """A registry of ``collectors`` (the worker's business gauges) and no default metric."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return registry


def fresh_multiprocess_dir() -> Path:
    """An empty folder for one ``portal serve``'s processes; named in the environment their
    serving processes inherit. Set before they start (prometheus_client picks its file-backed
    values when it is first imported there)."""
    path = Path(tempfile.mkdtemp(prefix="portal-metrics-"))
    os.environ[MULTIPROCESS_ENV] = str(path)
    return path


def remove_multiprocess_dir(path: Path) -> None:
    os.environ.pop(MULTIPROCESS_ENV, None)
    shutil.rmtree(path, ignore_errors=True)


def process_ended(pid: int) -> None:
    """A serving process's live gauges leave the merge when it ends."""
    if os.environ.get(MULTIPROCESS_ENV):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class _Scrape(BaseHTTPRequestHandler):
    """``GET /metrics`` (or ``/``) on a listen address of its own, without a token: an operator
    keeps that address off the ingress."""

    registries: tuple[CollectorRegistry, ...] = ()
    default = True
    timeout = 10  # a scraper that stalls holds its thread no longer than this

    def do_GET(self) -> None:
        if self.path.partition("?")[0] not in ("/metrics", "/"):
            self.send_error(404)
            return
        body = exposition(*self.registries, default=self.default)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Scrapes every few seconds are not worth a line each."""


def serve_metrics(host: str, port: int, *registries: CollectorRegistry,
                  default: bool = True) -> ThreadingHTTPServer:
    """Serves ``exposition(*registries, default=default)`` on ``host:port`` from a daemon
    thread until ``shutdown()``."""
    handler = type("Scrape", (_Scrape,), {"registries": registries, "default": default})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
