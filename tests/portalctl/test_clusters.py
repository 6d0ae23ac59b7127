"""`portalctl clusters show` against the real app: a cluster's GPUs in use, guaranteed and
burst, as the worker last read its leaf queue."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from app.clusters.models import ClusterGpusInUse, VirtualCluster
from tests.portalctl.conftest import Portal, PortalCtl


def _read_by_the_worker(portal: Portal, guaranteed: float, burst: float) -> None:
    with portal.database.transaction() as db:
        cluster = db.scalars(select(VirtualCluster.id).where(VirtualCluster.name == "train")).one()
        db.merge(ClusterGpusInUse(cluster_id=cluster, guaranteed_gpus=guaranteed,
                                  burst_gpus=burst, observed_at=datetime.now(UTC)))


def test_show_says_how_many_gpus_in_use_are_burst_and_reclaimable(
        portal_with_ready_cluster: Portal, portalctl: PortalCtl) -> None:
    portal = portal_with_ready_cluster
    portalctl.login(portal, "acme-viewer")
    assert "not read yet" in portalctl("clusters", "show", "train").stdout
    _read_by_the_worker(portal, 4.0, 2.0)
    shown = portalctl("clusters", "show", "train")
    assert shown.exit_code == 0, shown.stderr
    assert "4 guaranteed, 2 burst (reclaimable by KAI)" in shown.stdout
    as_json = portalctl("clusters", "show", "train", "-o", "json").stdout
    assert '"reclaimable": true' in as_json
    _read_by_the_worker(portal, 3.0, 0.0)
    assert "3 guaranteed, no burst" in portalctl("clusters", "show", "train").stdout
