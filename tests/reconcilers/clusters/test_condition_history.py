"""The worker's condition writes keep each transition (the latest 20 per cluster), so that the
cluster page draws a condition that flipped as each status it held, which the table of
current conditions cannot show."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.clusters import repository
from app.clusters.models import ConditionTransition
from tests import factories
from tests.support.tenancy import build_tenancy, headers
from tests.support.web import HTML

START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)


def _write(
    db: Session,
    cluster_id: int,
    current: list[cond.Condition],
    ready: bool,
    minutes: int,
    reason: str = "Checked",
) -> list[cond.Condition]:
    """What a reconcile does: set a condition (its time moves only when its status flips) and
    write the cluster's conditions."""
    updated = cond.set_condition(
        current, cond.READY, ready, reason, "", 1, START + timedelta(minutes=minutes)
    )
    assert repository.update_status(db, cluster_id, conditions=updated)
    return updated


def _kept(db: Session, cluster_id: int) -> list[tuple[str, str]]:
    rows = db.scalars(
        select(ConditionTransition)
        .where(ConditionTransition.cluster_id == cluster_id)
        .order_by(ConditionTransition.id)
    )
    return [(row.status, row.reason) for row in rows]


def test_each_flip_is_kept_and_a_rewrite_of_the_same_status_is_not(db: Session) -> None:
    t = build_tenancy(db)
    cluster = factories.cluster(db, t.acme, factories.env_host(db))
    now = _write(db, cluster.id, [], False, 0, "Installing")
    now = _write(db, cluster.id, now, False, 1, "StillInstalling")  # same status: no flip
    now = _write(db, cluster.id, now, True, 2, "Ready")
    now = _write(db, cluster.id, now, False, 30, "HostUnreachable")
    _write(db, cluster.id, now, True, 40, "Ready")
    assert _kept(db, cluster.id) == [
        ("False", "Installing"),
        ("True", "Ready"),
        ("False", "HostUnreachable"),
        ("True", "Ready"),
    ]


def test_only_the_latest_transitions_are_kept(db: Session) -> None:
    t = build_tenancy(db)
    cluster = factories.cluster(db, t.acme, factories.env_host(db))
    now: list[cond.Condition] = []
    for minute in range(25):
        now = _write(db, cluster.id, now, minute % 2 == 1, minute, f"Flip{minute}")
    kept = _kept(db, cluster.id)
    assert len(kept) == repository.KEPT_TRANSITIONS == 20
    assert kept[0][1] == "Flip5" and kept[-1][1] == "Flip24"
    other = factories.cluster(db, t.acme, factories.env_host(db), "other")
    _write(db, other.id, [], True, 0)
    assert len(_kept(db, cluster.id)) == 20  # each cluster keeps its own
    assert db.scalar(select(func.count()).select_from(ConditionTransition)) == 21


def test_the_cluster_page_draws_each_status_a_condition_held(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    cluster = factories.cluster(db, t.acme, factories.env_host(db))
    now = _write(db, cluster.id, [], True, 0, "Ready")
    now = _write(db, cluster.id, now, False, 30, "HostUnreachable")
    _write(db, cluster.id, now, True, 40, "Ready")
    db.commit()
    page = client.get(
        "/t/acme/clusters/train/status", headers={**HTML, **headers(db, t.acme_viewer)}
    ).text
    lane = re.findall(r'data-condition="Ready" data-status="(\w+)"', page)
    assert lane == ["True", "False", "True"]  # the table shows only the last
    assert "Ready became False (HostUnreachable)" in page
    assert len(re.findall(r'<tr data-condition="Ready"', page)) == 1
