"""``portal webhook``: the mutating admission webhook over HTTPS.

Small on purpose: the standard library's threading HTTP server, one TLS handshake per connection
in that connection's thread (with a timeout, so a slow client cannot hold the accept loop), a
request body limit and JSON answers for every error.

The key pair comes from the host Secret that the worker maintains and is re-read every minute.
Each reload builds a new ``SSLContext`` and swaps it in for new connections, rather than calling
``load_cert_chain`` on a context other threads are handshaking with. A new certificate is only
served once the webhook configuration's caBundle trusts it, so a rotation never has the API
server refuse the certificate it is shown.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from app.database.core import Database
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from app.hosts.webhook_route import host_id_of
from app.kit.config import Settings
from app.kube.connector import KubeConnector, for_host
from app.kube.errors import KubeError
from app.kube.manifests.admission import (
    WEBHOOK_CONFIGURATION_NAME,
    WEBHOOK_NAME,
    WEBHOOK_PATH,
)
from app.kube.manifests.webhook import TLS_SECRET_NAME
from app.kube.port import KubePort
from app.webhook import certificates as certs
from app.webhook import mutation
from app.webhook.secret import read_secret, unbase64

log = logging.getLogger(__name__)
# An UPDATE review carries the pod twice; etcd keeps objects under 1.5 MiB.
MAX_BODY_BYTES = 4 * 1024 * 1024
CONNECTION_TIMEOUT_SECONDS = 30.0
RELOAD_SECONDS = 60.0
NAMESPACE_TTL_SECONDS = 30.0
# How long a host's client, read from the database by id, is used before it is read again.
HOST_TTL_SECONDS = 60.0
FIRST_CERTIFICATE_POLL_SECONDS = 5.0
HEALTH_PATH = "/healthz"


class NamespaceLabels:
    """Namespace labels read through the host API, kept ``ttl_seconds``.

    Only shared-pool and hardened namespaces are kept: the API server calls the webhook because
    a namespace matches a selector, so a namespace seen without the labels is read again next
    time rather than trusted stale.
    """

    def __init__(self, host: KubePort, ttl_seconds: float = NAMESPACE_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> dict[str, str] | None:
        with self._lock:
            cached = self._cache.get(name)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        found = self.host.get("v1", "Namespace", name) if name else None
        if found is None:
            return None
        labels = dict((found.get("metadata") or {}).get("labels") or {})
        watched = mutation.shared_pool_queue(labels) or mutation.hardening_level(labels)
        if watched is not None:
            with self._lock:
                self._cache[name] = (self.clock() + self.ttl_seconds, labels)
        return labels


HostLookup = Callable[[int], KubePort | None]


class HostNamespaces:
    """Namespace labels of the host a review's path names (``/mutate-pods/hosts/<id>``).

    The host's credentials come from the database through ``lookup`` (the host's client, or
    None for a host that is gone or cannot be reached); each host's client is kept
    ``ttl_seconds``, so rotated credentials or a deleted host are taken up within that (an id
    that names no host is not kept, so no caller can fill the cache). When
    the database cannot be read, the last answer is kept a while longer rather than failing
    every pod.
    """

    def __init__(self, lookup: HostLookup, ttl_seconds: float = HOST_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lookup = lookup
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._cache: dict[int, tuple[float, NamespaceLabels]] = {}
        self._lock = threading.Lock()

    def get(self, host_id: int) -> NamespaceLabels | None:
        with self._lock:
            cached = self._cache.get(host_id)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        try:
            port = self.lookup(host_id)
        except Exception as error:
            if cached is None:
                raise
            log.warning("looking up host cluster %d failed (%s); using what was known",
                        host_id, type(error).__name__)
            return cached[1]
        if port is None:
            return None  # not kept: the cache holds registered hosts only, however many ids
        labels = NamespaceLabels(port)
        with self._lock:
            self._cache[host_id] = (self.clock() + self.ttl_seconds, labels)
        return labels


def host_lookup(settings: Settings, database: Database, connector: KubeConnector) -> HostLookup:
    """A registered host's client by id: its sealed credentials read from the database and
    opened with the portal's key, the client from the connector (cached per host there)."""
    def lookup(host_id: int) -> KubePort | None:
        with database.session() as db:
            row = hosts_repository.host_by_id(db, host_id)
            target = hosts_service.target_for(row, settings) if row is not None else None
        return for_host(connector, target) if target is not None else None
    return lookup


class ServingCertificate:
    """The TLS context new connections get, reloaded from the host Secret."""

    def __init__(self, host: KubePort, namespace: str, cert_dir: Path | None = None) -> None:
        self.host = host
        self.namespace = namespace
        self.cert_dir = cert_dir
        self.context: ssl.SSLContext | None = None
        self.fingerprint: str | None = None
        self._lock = threading.Lock()

    def reload(self) -> bool:
        """Serve the Secret's certificate if it is new and trusted; True when it switched."""
        with self._lock:
            try:
                pair = self._candidate()
                if pair is None:
                    return False
                self.context = self._context_for(pair)
            except (KubeError, ssl.SSLError, OSError) as error:
                log.warning("loading the webhook certificate failed (%s); still serving %s",
                            getattr(error, "message", error), self.fingerprint)
                return False
            self.fingerprint = certs.fingerprint(pair.cert_pem)
        log.info("serving certificate %s, valid until %s", self.fingerprint,
                 certs.not_after(pair.cert_pem).isoformat())
        return True

    def _candidate(self) -> certs.ServingCertificate | None:
        """The Secret's key pair when it is not the one served and the API server trusts it."""
        pair = read_secret(self.host.get("v1", "Secret", TLS_SECRET_NAME, self.namespace)).pair
        if pair is None or certs.fingerprint(pair.cert_pem) == self.fingerprint:
            return None
        if self.context is not None and not self._trusted(pair.cert_pem):
            log.info("certificate %s is not in the caBundle yet; still serving %s",
                     certs.fingerprint(pair.cert_pem), self.fingerprint)
            return None
        return pair

    def _trusted(self, cert_pem: str) -> bool:
        """Whether the API server would accept ``cert_pem`` (no configuration: nobody calls)."""
        configuration = self.host.get("admissionregistration.k8s.io/v1",
                                      "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION_NAME)
        if configuration is None:
            return True
        bundles = [w.get("clientConfig", {}).get("caBundle") or ""
                   for w in configuration.get("webhooks") or [] if w.get("name") == WEBHOOK_NAME]
        trusted = {pem for b in bundles for pem in certs.bundle_certificates(unbase64(b))}
        return certs.bundle_certificates(cert_pem)[0] in trusted

    def _context_for(self, pair: certs.ServingCertificate) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # load_cert_chain reads files only: private ones (0600, mkstemp), removed right away.
        with _private_file(pair.cert_pem, self.cert_dir) as cert_file, \
                _private_file(pair.key_pem, self.cert_dir) as key_file:
            context.load_cert_chain(cert_file, key_file)
        return context


@contextmanager
def _private_file(text: str, directory: Path | None) -> Iterator[Path]:
    descriptor, name = tempfile.mkstemp(dir=directory, suffix=".pem")
    path = Path(name)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
        yield path
    finally:
        path.unlink(missing_ok=True)


class Webhook:
    """The handler's logic: one AdmissionReview body in, one answer out. A review without a
    host in its path comes from the environment's host; one for ``/mutate-pods/hosts/<id>``
    is answered with that host's namespace labels."""

    def __init__(self, namespaces: NamespaceLabels,
                 hosts: HostNamespaces | None = None) -> None:
        self.namespaces = namespaces
        self.hosts = hosts

    def answer(self, review: Any, host_id: int | None = None) -> mutation.Review:
        request = mutation.request_of(review)
        namespace = str(request.get("namespace") or "")
        try:
            source = self._source(host_id)
            if source is None:
                return mutation.denied(
                    request["uid"], f"the portal's webhook knows no reachable host cluster "
                    f"{host_id}: is the host registered, with credentials?", 503,
                    "ServiceUnavailable")
            labels = source.get(namespace)
        except KubeError as error:
            log.warning("reading namespace %s failed: %s", namespace, error.message)
            return _unavailable(request["uid"], f"could not read namespace {namespace}")
        except Exception as error:  # the database or the host's credentials
            log.warning("finding host cluster %s failed (%s)", host_id, type(error).__name__)
            return _unavailable(request["uid"], f"could not find host cluster {host_id}")
        return mutation.review_pod(review, labels)

    def _source(self, host_id: int | None) -> NamespaceLabels | None:
        if host_id is None:
            return self.namespaces
        return self.hosts.get(host_id) if self.hosts is not None else None


def _unavailable(uid: str, what: str) -> mutation.Review:
    return mutation.denied(uid, f"the portal's webhook {what}; try again", 503,
                           "ServiceUnavailable")


class _Handler(BaseHTTPRequestHandler):
    server: AdmissionHTTPServer
    protocol_version = "HTTP/1.1"
    timeout = CONNECTION_TIMEOUT_SECONDS

    def do_GET(self) -> None:
        if self.path != HEALTH_PATH:
            self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})
        elif self.server.certificate.fingerprint is None:
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"status": "no certificate"})
        else:
            self._json(HTTPStatus.OK, {"status": "ok",
                                       "certificate": self.server.certificate.fingerprint})

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        host_id = host_id_of(path)
        if path != WEBHOOK_PATH and host_id is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})
            return
        body = self._body()
        if body is None:
            return
        try:
            answer = self.server.webhook.answer(json.loads(body), host_id)
        except ValueError as error:  # not JSON, or not an AdmissionReview
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
            return
        except Exception:
            # The API server then refuses the pod (failurePolicy Fail); say why here.
            log.exception("answering an admission review failed")
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})
            return
        self._json(HTTPStatus.OK, answer)

    def _body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._json(HTTPStatus.LENGTH_REQUIRED, {"error": "Content-Length required"})
            return None
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                       {"error": f"the body is limited to {MAX_BODY_BYTES} bytes"})
            return None
        return self.rfile.read(length)

    def _json(self, status: HTTPStatus, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class AdmissionHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], webhook: Webhook,
                 certificate: ServingCertificate) -> None:
        super().__init__(address, _Handler)
        self.webhook = webhook
        self.certificate = certificate
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """The TLS handshake happens here, in the connection's own thread."""
        context = self.certificate.context
        if context is None:
            return
        request.settimeout(CONNECTION_TIMEOUT_SECONDS)
        try:
            connection = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:
            log.debug("TLS handshake with %s failed: %s", client_address, error)
            return
        with self._connections_lock:
            self._connections.add(connection)
        try:
            _Handler(connection, client_address, self)
        finally:
            with self._connections_lock:
                self._connections.discard(connection)
            _close(connection)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-request is not worth a traceback on stderr.
        log.debug("connection from %s failed", client_address, exc_info=True)

    def close_connections(self) -> None:
        """End kept-alive connections too: a stopped webhook must stop answering."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                continue


def _close(connection: socket.socket) -> None:
    try:
        connection.close()
    except OSError:
        return


class WebhookServer:
    """The listener, the reload loop and their threads."""

    def __init__(self, host: KubePort, namespace: str, *, address: str = "127.0.0.1",
                 port: int = 9443, cert_dir: Path | None = None,
                 reload_seconds: float = RELOAD_SECONDS,
                 hosts: HostLookup | None = None) -> None:
        """``host``: the environment's host (the Secret, and reviews without a host in their
        path); ``hosts``: every registered host's client by id, for the others."""
        self.certificate = ServingCertificate(host, namespace, cert_dir)
        webhook = Webhook(NamespaceLabels(host),
                          HostNamespaces(hosts) if hosts is not None else None)
        self.http = AdmissionHTTPServer((address, port), webhook, self.certificate)
        self.reload_seconds = reload_seconds
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._serving = False
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    def reload_certificate(self) -> bool:
        return self.certificate.reload()

    def start(self) -> None:
        """Serve in background threads once a certificate is loaded (waiting for the worker to
        make one, if need be)."""
        for target, name in ((self._serve, "webhook-http"), (self._reload_loop, "webhook-tls")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_until_serving(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._serving:
            time.sleep(0.05)
        return self._serving

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            serving = self._serving
        if serving:
            self.http.shutdown()
        self.http.server_close()
        self.http.close_connections()
        for thread in self._threads:
            thread.join(10)

    def _serve(self) -> None:
        while self.certificate.context is None and not self._stopping.is_set():
            if not self.certificate.reload():
                log.info("waiting for the webhook certificate in Secret %s",
                         TLS_SECRET_NAME)
                self._stopping.wait(FIRST_CERTIFICATE_POLL_SECONDS)
        with self._lock:
            if self._stopping.is_set():
                return
            self._serving = True
        self.http.serve_forever(poll_interval=0.5)

    def _reload_loop(self) -> None:
        while not self._stopping.wait(self.reload_seconds):
            try:
                self.certificate.reload()
            except Exception:  # the loop must outlive a surprise; the next tick tries again
                log.exception("reloading the webhook certificate failed")
