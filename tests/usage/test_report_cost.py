"""A long usage report costs what its rows cost, not what its periods do (issue 53, item 6).

A report of 400 days by day built a SELECT per day into its statements: SQLAlchemy compiled
them anew on every request (0.2 s for an empty report), and PostgreSQL paired every raw
sample with every day. The figures are bench/usage_report.py's; these tests hold the causes:
the statements have one shape whatever the range (compiled once, then cached), and the same
answers on SQLite (the embedded default) and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.auth.models import User
from app.auth.principal import Principal
from app.database.core import Database
from app.gpu_classes.models import GpuClass
from app.tenants.models import Tenant
from app.usage import service
from app.usage.models import HourlyUsage, LedgerEntry, UsageSample
from app.usage.schemas import GroupBy, UsageFilters
from tests.support.sql import SAVEPOINTS, statements_during
from tests.usage.support import T0, LedgerClock, fix_clock

HOUR, DAY = 3600, 86400
NOW = T0 + timedelta(days=3, hours=5)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch).at(days=3, hours=5)


def _history(db: Session) -> Principal:
    """A cluster of 4 GPUs held from 30 days ago, 8 from ten days ago; its hourly use from 32
    days ago until two days ago and raw samples every ten minutes since, across midnights;
    every other hour and sample with its utilisation known."""
    tenant, gpu = Tenant(slug="acme", display_name="Acme"), GpuClass(
        product="NVIDIA-H100-80GB-HBM3", display_name="H100", memory_mib=81559)
    admin = User(email="admin@example.com", name="admin", is_platform_admin=True)
    db.add_all([tenant, gpu, admin])
    db.flush()
    now_s = int(NOW.timestamp())
    for at_s, gpus in ((now_s - 30 * DAY, 4), (now_s - 10 * DAY, 8)):
        db.add(LedgerEntry(at=datetime.fromtimestamp(at_s, T0.tzinfo), at_s=at_s,
                           kind="cluster", subject_id=7, tenant_id=tenant.id,
                           gpu_class_id=gpu.id, cluster_id=7, cluster_name="train", gpus=gpus))
    raw_since = (now_s - 2 * DAY) // HOUR * HOUR
    for hour_s in range(raw_since - 30 * DAY, raw_since, HOUR):
        db.add(HourlyUsage(hour_s=hour_s, source="queue", tenant_id=tenant.id,
                           gpu_class_id=gpu.id, subject_id=7, samples=6, mean_used_gpus=3.0,
                           peak_used_gpus=4.0, used_gpu_seconds=3.0 * HOUR,
                           burst_gpu_seconds=0.5 * HOUR,
                           utilised_gpu_seconds=1.5 * HOUR if hour_s % (2 * HOUR) else 0.0,
                           utilisation_known_seconds=3.0 * HOUR if hour_s % (2 * HOUR) else 0.0))
    for taken_s in range(raw_since, now_s, 600):
        db.add(UsageSample(taken_s=taken_s, source="queue", tenant_id=tenant.id,
                           gpu_class_id=gpu.id, subject_id=7, used_gpus=2.0, burst_gpus=0.5,
                           holds_s=600, utilised_gpus=0.5 if taken_s % 1200 else None))
    db.commit()
    return Principal(user=admin, via="session")


def _report(database: Database, principal: Principal, days: int,
            group_by: GroupBy) -> list[dict[str, Any]]:
    end = T0 + timedelta(days=4)
    filters = UsageFilters(start=end - timedelta(days=days), end=end, tenant="acme",
                           group_by=group_by)
    with database.transaction() as db:
        return [row.model_dump() for row in service.cluster_report(db, principal, filters).rows]


def _queries(database: Database, principal: Principal, days: int) -> list[str]:
    """The statements of a report by day, but the transaction's own (savepoint names)."""
    sent = statements_during(database, lambda: _report(database, principal, days, "day"))
    return [s for s in sent if not s.startswith(SAVEPOINTS)]


def test_a_report_sends_statements_of_one_shape_whatever_its_range(
    database: Database, db: Session, clock: LedgerClock
) -> None:
    principal = _history(db)
    shapes = {days: _queries(database, principal, days) for days in (30, 31, 400)}
    assert shapes[30] == shapes[31] == shapes[400]
    # Use from 32 days ago (hourly, then raw samples) to today, allocation from 30 days ago.
    assert len(_report(database, principal, 400, "day")) == 33


def test_the_report_is_the_same_on_sqlite_and_postgresql(
    database: Database, db: Session, sqlite_database: Database, clock: LedgerClock
) -> None:
    principal = _history(db)
    with sqlite_database.session() as embedded:
        on_sqlite = _history(embedded)
    reports: list[tuple[int, GroupBy]] = [(400, "day"), (3, "day"), (400, "month")]
    for days, group_by in reports:
        rows = _report(database, principal, days, group_by)
        assert rows == _report(sqlite_database, on_sqlite, days, group_by)
        assert sum(row["allocated_gpu_hours"] for row in rows) > 0
        assert sum(row["used_gpu_hours"] for row in rows) > 0
        assert {0 < row["utilisation_coverage"] < 1 for row in rows
                if row["used_gpu_hours"]} == {True}
    two_days = _report(database, principal, 2, "day")
    # Raw samples reach across midnight into the second day: both days have their use.
    assert [row["used_gpu_hours"] > 0 for row in two_days] == [True, True]
