"""The cost of a long usage report (issue 53, item 6), next to baselines measured in the same run.

A PostgreSQL database of its own (``<name>``, recreated and migrated to this checkout's head)
holds ``--tenants`` busy tenants, each with ``--clusters`` clusters that held GPUs for the
whole of the last 400 days: their ledger entries (a create and a resize each, and the quota),
400 days of hourly use, and two days of raw samples every five minutes, as the worker keeps
them. One more tenant, ``quiet``, has none of it: its report is a few bytes, as in the issue.

Each report is the usage service's own call (``app.usage.service.cluster_report``, what
``GET /api/v1/usage/clusters`` runs) in one transaction, timed on the wall clock with the
database's work in it; the lowest of ``--repeat`` is kept. Printed per report: milliseconds and
the ratio to the baselines, a 30-day report of the same tenant (the default range) and a
list (the tenant's quota, ``GET /api/v1/tenants/{t}/quota``).

Run: ``.venv/bin/python -m bench.usage_report [--tenants 10] [--clusters 3] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import select
from sqlalchemy.engine import make_url

from app.auth.models import User
from app.auth.principal import Principal
from app.database import migrate
from app.database.core import Database
from app.gpu_classes.models import GpuClass
from app.http.pagination import PageParams
from app.quotas import service as quota_service
from app.tenants.models import Tenant
from app.usage import service
from app.usage.schemas import GroupBy, UsageFilters

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/gtp_bench_usage"
HOUR = 3600
DAY = 24 * HOUR
HISTORY_DAYS = 400
SAMPLE_EVERY_S = 300
RAW_DAYS = 2


def _psycopg_url(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def recreate(url: str) -> None:
    name = make_url(url).database
    if not name:
        raise SystemExit(f"{url} names no database")
    with psycopg.connect(_psycopg_url(url, "postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    migrate.upgrade(url)


def seed(url: str, tenants: int, clusters: int, now_s: int) -> None:
    database = Database(url)
    with database.transaction() as db:
        gpu = GpuClass(product="NVIDIA-H100-80GB-HBM3", display_name="H100", memory_mib=81559)
        db.add(gpu)
        db.add(User(email="admin@bench.example.com", name="admin", is_platform_admin=True))
        for n in range(tenants):
            db.add(Tenant(slug=f"busy-{n}", display_name=f"Busy {n}"))
        db.add(Tenant(slug="quiet", display_name="Quiet"))
    with database.session() as db:
        gpu_id = db.scalars(select(GpuClass.id)).one()
        ids = {row[0]: row[1] for row in db.execute(select(Tenant.slug, Tenant.id))}
    database.dispose()
    busy = [ids[f"busy-{n}"] for n in range(tenants)]
    with psycopg.connect(_psycopg_url(url)) as connection:
        _copy(connection, "usage_ledger", ("at", "at_s", "kind", "subject_id", "tenant_id",
                                           "gpu_class_id", "cluster_id", "cluster_name", "gpus",
                                           "amount"),
              (row + row[-1:] for row in _ledger(busy, clusters, gpu_id, now_s)))
        _copy(connection, "usage_hourly", ("hour_s", "source", "tenant_id", "gpu_class_id",
                                           "subject_id", "samples", "mean_used_gpus",
                                           "peak_used_gpus", "mean_allocated_gpus",
                                           "mean_requested_gpus", "used_gpu_seconds",
                                           "burst_gpu_seconds"),
              _hours(busy, clusters, gpu_id, now_s))
        _copy(connection, "usage_samples", ("taken_s", "source", "tenant_id", "gpu_class_id",
                                            "subject_id", "used_gpus", "allocated_gpus",
                                            "requested_gpus", "burst_gpus", "holds_s"),
              _samples(busy, clusters, gpu_id, now_s))
    with psycopg.connect(_psycopg_url(url), autocommit=True) as connection:
        connection.execute("VACUUM (ANALYZE)")


def _copy(connection: psycopg.Connection[Any], table: str, columns: tuple[str, ...],
          rows: Iterator[tuple[Any, ...]]) -> None:
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))
    with connection.cursor().copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def _subjects(busy: list[int], clusters: int) -> Iterator[tuple[int, int]]:
    """(tenant id, cluster id) of every busy cluster."""
    for number, tenant_id in enumerate(busy):
        for c in range(clusters):
            yield tenant_id, number * clusters + c + 1


def _ledger(busy: list[int], clusters: int, gpu_id: int, now_s: int) -> Iterator[tuple[Any, ...]]:
    start_s = now_s - HISTORY_DAYS * DAY
    for tenant_id in busy:
        yield (datetime.fromtimestamp(start_s, UTC), start_s, "quota", tenant_id, tenant_id,
               gpu_id, None, "", 8 * clusters)
    for tenant_id, cluster_id in _subjects(busy, clusters):
        for at_s, gpus in ((start_s, 4), (start_s + HISTORY_DAYS * DAY // 2, 8)):
            yield (datetime.fromtimestamp(at_s, UTC), at_s, "cluster", cluster_id, tenant_id,
                   gpu_id, cluster_id, f"train-{cluster_id}", gpus)


def _hours(busy: list[int], clusters: int, gpu_id: int, now_s: int) -> Iterator[tuple[Any, ...]]:
    first = (now_s - HISTORY_DAYS * DAY) // HOUR * HOUR
    last = (now_s - RAW_DAYS * DAY) // HOUR * HOUR
    for tenant_id, cluster_id in _subjects(busy, clusters):
        for hour_s in range(first, last, HOUR):
            yield (hour_s, "queue", tenant_id, gpu_id, cluster_id, 12, 3.0, 4.0, 4.0, 3.0,
                   3.0 * HOUR, 0.5 * HOUR)


def _samples(busy: list[int], clusters: int, gpu_id: int,
             now_s: int) -> Iterator[tuple[Any, ...]]:
    first = (now_s - RAW_DAYS * DAY) // HOUR * HOUR
    for tenant_id, cluster_id in _subjects(busy, clusters):
        for taken_s in range(first, now_s, SAMPLE_EVERY_S):
            yield (taken_s, "queue", tenant_id, gpu_id, cluster_id, 3.0, 4.0, 3.0, 0.5, 600)


def lowest_ms(call: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - began)
    return best * 1000


def measure(url: str, repeat: int) -> dict[str, float]:
    database = Database(url)
    with database.session() as db:
        admin = db.scalar(select(User).where(User.is_platform_admin.is_(True)))
        assert admin is not None
        db.expunge(admin)
    principal = Principal(user=admin, via="token")
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(1)

    def report(slug: str, days: int, group_by: GroupBy) -> Callable[[], object]:
        filters = UsageFilters(start=end - timedelta(days=days), end=end, tenant=slug,
                               group_by=group_by)

        def run() -> object:
            with database.transaction() as db:
                return service.cluster_report(db, principal, filters)
        return run

    def quota_list() -> object:
        with database.transaction() as db:
            return quota_service.tenant_quota(db, principal, "busy-0", PageParams())

    figures = {"list": lowest_ms(quota_list, repeat)}
    for slug in ("busy-0", "quiet"):
        figures[f"{slug} 30 days by day"] = lowest_ms(report(slug, 30, "day"), repeat)
        figures[f"{slug} 400 days by day"] = lowest_ms(report(slug, 400, "day"), repeat)
        figures[f"{slug} 400 days by month"] = lowest_ms(report(slug, 400, "month"), repeat)
    database.dispose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="keep the seeded database")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.reuse:
        recreate(args.database_url)
        seed(args.database_url, args.tenants, args.clusters, int(time.time()))
    figures = measure(args.database_url, args.repeat)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{'report':<28} {'ms':>9} {'x 30 days':>10} {'x list':>8}")
    for name, ms in figures.items():
        tenant = name.split(" ")[0]
        thirty = figures.get(f"{tenant} 30 days by day", ms)
        print(f"{name:<28} {ms:9.1f} {ms / thirty:10.1f} {ms / figures['list']:8.1f}")


if __name__ == "__main__":
    main()
