"""What SQL a piece of code sends: statements recorded on the engine while it runs."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import event

from app.db import Database

WRITES = ("INSERT", "UPDATE", "DELETE")


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
