"""Service calls started at one moment, each in its own transaction, as parallel requests are."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.orm import Session

from app.database.core import Database
from app.kit.errors import Conflict

Call = Callable[[Session], object]


def run_in_parallel(database: Database, calls: list[Call]) -> Counter[str]:
    """Starts every call together; counts "ok" and "conflict" (a 409 the service raised)."""
    barrier = threading.Barrier(len(calls))

    def run(call: Call) -> str:
        barrier.wait()
        try:
            with database.transaction() as db:
                call(db)
        except Conflict:
            return "conflict"
        return "ok"

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return Counter(pool.map(run, calls))
