"""The worker loop with only the notification kind, in a process of its own, for the test that
SIGKILLs a worker mid-delivery: ``python -m tests.support.notification_worker``.

Settings come from ``PORTAL_*`` as for ``portal worker``. The first line on stdout is the
worker's identity, the prefix of its lease tokens.
"""

from __future__ import annotations

import os

from app.reconcilers.notifications import NotificationSender
from tests.support.cluster_worker import run_worker


def main() -> None:
    run_worker(lambda settings, database: [NotificationSender(settings, database)])


def notification_worker_env(*, database_url: str, lease_seconds: float,
                            **extra: str) -> dict[str, str]:
    """The environment of a worker process: this one's, minus its own ``PORTAL_*``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env.update({"PORTAL_ENV": "test", "PORTAL_DATABASE_URL": database_url,
                "PORTAL_WORKER_LEASE_SECONDS": str(lease_seconds),
                "PORTAL_WORKER_POLL_SECONDS": "0.2", **extra})
    return env


if __name__ == "__main__":
    main()
