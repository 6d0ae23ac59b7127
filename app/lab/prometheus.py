"""A real Prometheus (``make tools`` builds it into .cache/bin) as a process: its scrape jobs,
its rule files, its TSDB in a folder of its own (kept across a stop and a start, as a
restarted server keeps its data). The lab scrapes the portal and its played DCGM exporter with
it; the tests' ``running_prometheus`` starts one per test. Every wait and HTTP call is bounded.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from app.lab.processes import terminate_all

STOP_SECONDS = 10.0
HTTP_SECONDS = 5.0


class PrometheusError(RuntimeError):
    pass


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job: its ``job`` label, ``host:port`` targets, path, optional bearer token
    (the web's ``/metrics`` on the public port wants ``PORTAL_METRICS_TOKEN``) and whether the
    target's own labels win over Prometheus' (``honor_labels``: off, a clash is kept as
    ``exported_<label>``)."""

    name: str
    targets: Sequence[str]
    metrics_path: str = "/metrics"
    bearer_token: str | None = None
    honor_labels: bool = False


def scrape_config(jobs: Sequence[ScrapeJob], interval: str = "1s",
                  rule_files: Sequence[Path] = ()) -> dict[str, Any]:
    def job(spec: ScrapeJob) -> dict[str, Any]:
        config: dict[str, Any] = {"job_name": spec.name, "metrics_path": spec.metrics_path,
                                  "honor_labels": spec.honor_labels,
                                  "static_configs": [{"targets": list(spec.targets)}]}
        if spec.bearer_token is not None:
            config["authorization"] = {"type": "Bearer", "credentials": spec.bearer_token}
        return config

    return {"global": {"scrape_interval": interval, "scrape_timeout": interval,
                       "evaluation_interval": interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [job(spec) for spec in jobs]}


@dataclass
class PrometheusProcess:
    """``start()`` writes the configuration and starts the server on ``address``
    (``host:port``); ``stop()`` ends it (terminate, then kill)."""

    program: Path
    folder: Path
    address: str
    jobs: Sequence[ScrapeJob]
    interval: str = "1s"
    rule_files: Sequence[Path] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def log(self) -> Path:
        return self.folder / "prometheus.log"

    def start(self) -> PrometheusProcess:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(self.jobs, self.interval,
                                                       self.rule_files)))
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [str(self.program), f"--config.file={config}",
                 f"--storage.tsdb.path={self.folder / 'data'}",
                 f"--web.listen-address={self.address}"],
                stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        return self

    def stop(self) -> None:
        if self.process is not None:
            terminate_all([self.process], timeout=STOP_SECONDS)

    def ready(self) -> bool:
        """Answers ``/-/ready``; fails when the process has exited."""
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise PrometheusError(f"prometheus exited ({code}):\n{self._log_tail()}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=HTTP_SECONDS,
                             trust_env=False).status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self, timeout: float) -> None:
        self._wait(self.ready, "ready", timeout)

    def targets_down(self) -> list[str]:
        """The jobs with a target not (yet) scraped up, or with none; empty when every job's
        targets are up."""
        answer = httpx.get(f"{self.url}/api/v1/targets", params={"state": "active"},
                           timeout=HTTP_SECONDS, trust_env=False)
        answer.raise_for_status()
        up: dict[str, bool] = {}
        for target in answer.json()["data"]["activeTargets"]:
            job = target["labels"].get("job", "")
            up[job] = up.get(job, True) and target["health"] == "up"
        return [job.name for job in self.jobs if not up.get(job.name)]

    def wait_targets_up(self, timeout: float) -> None:
        def all_up() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return not self.targets_down()
            return False
        self._wait(all_up, "every target up", timeout)

    def _wait(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.3)
        down = ""
        with contextlib.suppress(httpx.HTTPError, PrometheusError):
            down = f" (down: {', '.join(self.targets_down())})"
        raise PrometheusError(f"prometheus on {self.address} not {what} within {timeout:.0f}s"
                              f"{down}: see {self.log}")

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


@dataclass
class Telemetry:
    """The lab's Prometheus, which a walk may stop (the portal then says "unknown") and start
    again on its kept data."""

    prometheus: PrometheusProcess
    ready_seconds: float
    targets_seconds: float

    @property
    def url(self) -> str:
        return self.prometheus.url

    def start_prometheus(self) -> None:
        """Started, ready, and every target scraped up, or ``PrometheusError``."""
        self.prometheus.start()
        self.prometheus.wait_ready(self.ready_seconds)
        self.prometheus.wait_targets_up(self.targets_seconds)

    def stop_prometheus(self) -> None:
        self.prometheus.stop()
