"""The embedded default's one writer: a transaction that may write waits its turn for the
write lock, however it began, rather than failing at once beside another writer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from app.database.core import Database

HOLD_SECONDS = 0.3
BOUND_SECONDS = 20


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'portal.db'}")
    with database.transaction() as db:
        db.execute(text("CREATE TABLE notes (body TEXT NOT NULL)"))
        db.execute(text("INSERT INTO notes VALUES ('first')"))
    yield database
    database.dispose()


def _hold_the_write_lock(database: Database, holding: threading.Event,
                         release: threading.Event) -> None:
    """A worker's write in progress: its row written, its commit not yet."""
    with database.transaction() as db:
        db.execute(text("INSERT INTO notes VALUES ('worker')"))
        holding.set()
        release.wait(BOUND_SECONDS)


def test_a_write_that_reads_first_waits_for_a_writer_in_progress_instead_of_failing(
    database: Database,
) -> None:
    """An admin's Approve reads, then writes; a worker's write held the lock meanwhile. The
    approve used to fail at once ("database is locked", a 409 to the admin)."""
    holding, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=_hold_the_write_lock, args=(database, holding, release))
    worker.start()
    assert holding.wait(BOUND_SECONDS)
    threading.Timer(HOLD_SECONDS, release.set).start()
    with database.transaction() as db:
        seen = db.execute(text("SELECT count(*) FROM notes")).scalar_one()
        db.execute(text("INSERT INTO notes VALUES ('admin')"))
    worker.join(BOUND_SECONDS)
    with database.read_session() as db:
        bodies = sorted(db.execute(text("SELECT body FROM notes")).scalars())
    assert bodies == ["admin", "first", "worker"]
    assert seen == 2  # it began after the worker's commit, so it saw the worker's row


def test_a_session_that_only_reads_never_waits_for_a_writer(database: Database) -> None:
    """The worker commits only once the read is done: a read waiting for the write lock
    would never finish (bounded here) and the worker would not commit."""
    holding, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=_hold_the_write_lock, args=(database, holding, release))
    worker.start()
    assert holding.wait(BOUND_SECONDS)
    with database.read_session() as db:
        bodies = list(db.execute(text("SELECT body FROM notes")).scalars())
    release.set()
    worker.join(BOUND_SECONDS)
    assert bodies == ["first"]  # the worker's row is not committed yet
    assert not worker.is_alive()
