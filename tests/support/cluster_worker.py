"""The worker loop with only the cluster reconciler, in a process of its own, for tests and the
benchmark that SIGKILL a worker: ``python -m tests.support.cluster_worker``.

Settings come from ``PORTAL_*`` as for ``portal worker``, which also runs the node, kubeconfig,
quota and webhook reconcilers; on the host API server a test run shares, those would act on
what other tests made. The first line on stdout is the worker's identity, the prefix of its
lease tokens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import app.process.all_models  # noqa: F401 - every table, as `portal worker` has them
from app.database.core import Database
from app.kit.config import Settings
from app.kit.logs import configure_logging
from app.kube.connector import ClientConnector
from app.process.wiring import connect_hooks
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.kind import Kind
from app.reconcilers.runtime import Runtime
from tests.support.drive import beside
from tests.support.paths import ROOT

STOP_SECONDS = 30.0


def main() -> None:
    run_worker(_cluster_kinds)


def _cluster_kinds(settings: Settings, database: Database) -> list[Kind]:
    reconciler = ClusterReconciler(settings, database, ClientConnector(settings))
    return [*beside(reconciler), reconciler]


def run_worker(kinds: Callable[[Settings, Database], list[Kind]]) -> None:
    """The worker loop over ``kinds`` as `portal worker` runs it, until SIGTERM; the first line
    on stdout is its identity."""
    settings = Settings()
    configure_logging(settings.log_level)
    connect_hooks()  # as `portal worker`: the audit trail's outbox listens to every change
    database = Database(settings.database_url)
    worker = Runtime(database, kinds(settings, database),
                     lease_seconds=settings.worker_lease_seconds,
                     concurrency=settings.worker_concurrency,
                     poll_seconds=settings.worker_poll_seconds)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        worker.stop()

    signal.signal(signal.SIGTERM, stop)
    sys.stdout.write(worker.identity + "\n")
    sys.stdout.flush()
    try:
        worker.run()
    finally:
        database.dispose()


def worker_env(*, database_url: str, kubeconfig: Path, helm: Path, lease_seconds: float,
               poll_seconds: float = 0.5, **extra: str) -> dict[str, str]:
    """The environment of a worker process: this one's, minus its own ``PORTAL_*``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env.update({
        "PORTAL_ENV": "test", "PORTAL_DATABASE_URL": database_url,
        "PORTAL_KUBECONFIG": str(kubeconfig), "PORTAL_HELM_BINARY": str(helm),
        "PORTAL_WORKER_LEASE_SECONDS": str(lease_seconds),
        "PORTAL_WORKER_POLL_SECONDS": str(poll_seconds), **extra,
    })
    return env


@dataclass
class WorkerProcess:
    """A worker started with ``start``; ``kill`` is SIGKILL for it and what it runs (helm)."""

    popen: subprocess.Popen[str]
    identity: str

    @classmethod
    def start(cls, env: Mapping[str, str], log: Path,
              module: str = "tests.support.cluster_worker") -> WorkerProcess:
        """``module``'s worker (its ``main`` calls ``run_worker``) in a session of its own."""
        with log.open("a") as errors:
            popen = subprocess.Popen(
                [sys.executable, "-m", module], env=dict(env), cwd=ROOT,
                stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True)
        assert popen.stdout is not None
        identity = popen.stdout.readline().strip()
        if not identity:
            popen.wait(STOP_SECONDS)
            raise RuntimeError(f"the worker did not start: {log.read_text()[-2000:]}")
        return cls(popen, identity)

    def holds(self, lease_owner: str | None) -> bool:
        return lease_owner is not None and lease_owner.startswith(f"{self.identity}/")

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)
        self.popen.wait(STOP_SECONDS)

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        self.kill()  # what is left of its process group (a helm run it started)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)  # its own session: the group is its pid


if __name__ == "__main__":
    main()
