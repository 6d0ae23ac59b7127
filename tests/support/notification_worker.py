"""The worker loop with only the notification kind, in a process of its own, for the test that
SIGKILLs a worker mid-delivery: ``python -m tests.support.notification_worker``.

Settings come from ``PORTAL_*`` as for ``portal worker``. The first line on stdout is the
worker's identity, the prefix of its lease tokens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import app.process.all_models  # noqa: F401 - every table, as `portal worker` has them
from app.database.core import Database
from app.kit.config import Settings
from app.kit.logs import configure_logging
from app.process.wiring import connect_hooks
from app.reconcilers.notifications import NotificationSender
from app.reconcilers.runtime import Runtime
from tests.support.paths import ROOT


def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    connect_hooks()
    database = Database(settings.database_url)
    worker = Runtime(database, [NotificationSender(settings, database)],
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


def notification_worker_env(*, database_url: str, lease_seconds: float,
                            **extra: str) -> dict[str, str]:
    """The environment of a worker process: this one's, minus its own ``PORTAL_*``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env.update({"PORTAL_ENV": "test", "PORTAL_DATABASE_URL": database_url,
                "PORTAL_WORKER_LEASE_SECONDS": str(lease_seconds),
                "PORTAL_WORKER_POLL_SECONDS": "0.2", **extra})
    return env


@dataclass
class NotificationWorker:
    popen: subprocess.Popen[str]
    identity: str

    @classmethod
    def start(cls, env: Mapping[str, str], log: Path) -> NotificationWorker:
        with log.open("a") as errors:
            popen = subprocess.Popen(
                [sys.executable, "-m", "tests.support.notification_worker"], env=dict(env),
                cwd=ROOT, stdout=subprocess.PIPE, stderr=errors, text=True,
                start_new_session=True)
        assert popen.stdout is not None
        identity = popen.stdout.readline().strip()
        if not identity:
            popen.wait(30)
            raise RuntimeError(f"the worker did not start: {log.read_text()[-2000:]}")
        return cls(popen, identity)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # its own session: the group is its pid
        self.popen.wait(30)

    def stop(self, timeout: float = 30.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        self.kill()


if __name__ == "__main__":
    main()
