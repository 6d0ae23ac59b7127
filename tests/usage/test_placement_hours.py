"""The usage ledger tells shared-pool clusters' GPU-hours from dedicated-nodes clusters': those
run on the tenant's dedicated nodes, so what the approved quota bounds is the shared-pool
clusters' hours and the dedicated nodes' hours, never the dedicated ones twice."""

from __future__ import annotations

import csv
import io

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clusters import service as clusters
from app.clusters.schemas import ClusterCreate
from app.nodes.models import Node
from app.usage.csv_export import COLUMNS
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.tenancy import build_tenancy, headers
from tests.usage.support import LedgerClock, approve_quota, create_cluster, fix_clock, report

DAY = {"from": "2026-11-02T00:00:00Z", "to": "2026-11-03T00:00:00Z"}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def test_dedicated_nodes_clusters_hours_are_not_counted_with_the_shared_pools(
        client: TestClient, db: Session, clock: LedgerClock) -> None:
    """16 approved, a node of 8 dedicated, 8 in a shared-pool cluster and 8 in a
    dedicated-nodes cluster on that node, for a day: 384 allocated GPU-hours, 192 of them in
    the shared pool, with 192 of dedicated nodes: 384 against 384 approved."""
    t = build_tenancy(db)
    approve_quota(db, t, 16)
    node = db.scalars(select(Node).order_by(Node.id)).first()
    assert node is not None
    factories.assignment(db, node, t.acme)
    create_cluster(db, t, "shared", 8)
    clusters.create_cluster(db, t.principal(t.acme_admin), cluster_settings(), "acme",
                            ClusterCreate(name="ded", gpu_class_id=t.h100.id, gpus=8,
                                          placement="dedicated-nodes"))
    clock.at(hours=30)
    db.commit()
    [row] = report(db, t.principal(t.acme_viewer), tenant="acme").rows
    assert (row.approved_gpu_hours, row.allocated_gpu_hours, row.shared_pool_gpu_hours,
            row.dedicated_gpu_hours) == (384.0, 384.0, 192.0, 192.0)
    assert row.shared_pool_gpu_hours + row.dedicated_gpu_hours <= row.approved_gpu_hours
    lines = list(csv.reader(io.StringIO(client.get(
        "/api/v1/usage.csv", params=DAY, headers=headers(db, t.acme_viewer)).text)))
    index = COLUMNS.index("shared_pool_gpu_hours")
    assert (lines[0][index], lines[1][index]) == ("shared_pool_gpu_hours", "192.000000")
