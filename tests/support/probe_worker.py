"""A worker process running the real runtime on a probe kind, for tests that start several:
``python -m tests.support.probe_worker <database-url> <log-file> <keys>``.

Each reconcile of a key appends ``key pid start end`` (monotonic-free wall times, in ns) to the
log file with one write, so that a test can tell whether two processes ever held one key at
once. SIGTERM stops the worker gracefully.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

from sqlalchemy.orm import Session

from app.database.core import Database
from app.reconcilers.kind import Context, Outcome
from app.reconcilers.runtime import Runtime

KIND = "probe"
# Long enough that two holders of one key would overlap, short enough for many rounds.
WORK_SECONDS = 0.02


class Probe:
    name = KIND
    resync_seconds = 3600.0

    def __init__(self, log: str, keys: int) -> None:
        self.log = log
        self.count = keys

    def keys(self, db: Session) -> list[str]:
        return [str(k) for k in range(self.count)]

    def reconcile(self, key: str, context: Context) -> Outcome:
        started = time.time_ns()
        time.sleep(WORK_SECONDS)
        context.lease.check()
        line = f"{key} {os.getpid()} {started} {time.time_ns()}\n".encode()
        descriptor = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)
        return Outcome(requeue_after=0.0)  # due again at once: the workers contend for it


def main() -> None:
    url, log, keys = sys.argv[1], sys.argv[2], int(sys.argv[3])
    database = Database(url, pool_size=8)
    runtime = Runtime(database, [Probe(log, keys)], lease_seconds=5.0, concurrency=4,
                      poll_seconds=0.05)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        runtime.stop()

    signal.signal(signal.SIGTERM, stop)
    sys.stdout.write("started\n")
    sys.stdout.flush()
    try:
        runtime.run()
    finally:
        database.dispose()


if __name__ == "__main__":
    main()
