"""Check now calls the host for seconds; the rest of the portal writes meanwhile."""

from __future__ import annotations

import sqlite3
import threading

from sqlalchemy import text

from app.auth.principal import Principal
from app.database.core import Database
from app.hosts import service
from app.kit.config import Settings
from app.kube.simulated import SimulatedHost
from app.templates.charts import ChartLookup
from tests import factories

BOUND_SECONDS = 20
# Far below SQLite's busy wait of the app's sessions: a write lock held through the check
# would make the other writer fail rather than wait.
OTHER_WAIT_SECONDS = 0.5


class WritingWhileChecked:
    """The chart lookup, one of the checks: while it runs, another process writes."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.wrote: bool | None = None

    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        path = str(self.database.engine.url.database)
        other = sqlite3.connect(path, timeout=OTHER_WAIT_SECONDS, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("UPDATE users SET name = name")
            other.execute("COMMIT")
            self.wrote = True
        except sqlite3.OperationalError:  # "database is locked": the finding
            self.wrote = False
        finally:
            other.close()
        return ChartLookup()


def test_a_write_elsewhere_goes_on_while_a_host_is_checked(sqlite_database: Database,
                                                           settings: Settings) -> None:
    with sqlite_database.transaction() as db:
        principal = Principal(user=factories.user(db, admin=True), via="token", roles={})
        name = factories.env_host(db).name
    charts = WritingWhileChecked(sqlite_database)
    done = threading.Event()

    def check() -> None:
        with sqlite_database.transaction() as db:
            service.check_host(db, principal, settings, SimulatedHost([], startup_seconds=0),
                               charts, name)
        done.set()
    worker = threading.Thread(target=check)
    worker.start()
    worker.join(BOUND_SECONDS)
    assert done.is_set()
    assert charts.wrote is True
    with sqlite_database.read_session() as db:
        checked = db.execute(text("SELECT health_checked_at FROM host_clusters")).scalar_one()
    assert checked is not None
