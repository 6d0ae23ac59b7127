"""What SQL a piece of code sends: statements recorded on the engine while it runs."""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import event
from sqlalchemy.orm import Session

from app.database.core import Database
from app.database.kept import MAX_AGE_SECONDS, forget_everything

WRITES = ("INSERT", "UPDATE", "DELETE")
SAVEPOINTS = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")
WARM_TRIES = 20


def statements_during(database: Database, call: Callable[[], object]) -> list[str]:
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(statement)

    event.listen(database.engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(database.engine, "before_cursor_execute", record)
    return seen


def writes(statements: list[str]) -> list[str]:
    """The INSERT, UPDATE and DELETE statements among ``statements``."""
    return [s for s in statements if s.lstrip().split(" ", 1)[0].upper() in WRITES]


def one_request(database: Database, client: TestClient, url: str, headers: dict[str, str],
                before: Callable[[], object] = lambda: None) -> list[str]:
    """The statements of one GET, sent right after an identical one: what a read notes at most
    once a minute (a token's last use, a session's last visit) is then behind it. ``before``
    runs ahead of each (e.g. to forget what a page keeps for a moment)."""
    def send() -> None:
        before()
        response: Response = client.get(url, headers=headers)
        assert response.status_code == 200, response.text

    for _ in range(WARM_TRIES):
        # Each kept figure is read by the first of the two, so none is older than the pair.
        with database.read_session() as session:
            forget_everything(session)
        started = time.monotonic()
        send()
        seen = statements_during(database, send)
        # Warm only if what the first kept (app.database.kept) is still kept for the second:
        # on a loaded machine the two took longer, and the second read it all again.
        if time.monotonic() - started < MAX_AGE_SECONDS:
            # The test's outer transaction turns each request's into a savepoint.
            return [s for s in seen if not s.lstrip().upper().startswith(SAVEPOINTS)]
    raise AssertionError(f"{url} was never answered twice within {MAX_AGE_SECONDS} s")


def at_two_sizes(db: Session, add: Callable[[], object], read: Callable[[], list[str]],
                 sizes: tuple[int, int] = (3, 30)) -> tuple[list[str], list[str]]:
    """``read``'s statements once ``add`` made ``sizes[0]`` rows, then ``sizes[1]`` in all."""
    costs = []
    made = 0
    for size in sizes:
        for _ in range(size - made):
            add()
        made = size
        db.commit()
        costs.append(read())
    return costs[0], costs[1]


def assert_flat(few: list[str], many: list[str], budget: int) -> None:
    """One request's statements did not grow with the data, stay within the endpoint's budget
    and write nothing."""
    listing = "\n".join(many)
    assert len(many) == len(few), f"{len(few)} statements grew to {len(many)}:\n{listing}"
    assert len(many) <= budget, f"{len(many)} statements, more than {budget}:\n{listing}"
    assert writes(few + many) == [], f"a read wrote:\n{listing}"
