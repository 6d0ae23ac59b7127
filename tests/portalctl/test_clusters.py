"""`portalctl clusters show` against the real app: a cluster's GPUs in use, guaranteed and
burst, as the worker last read its leaf queue."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from app.clusters.models import ClusterGpusInUse, VirtualCluster
from app.hosts.models import HostCluster
from tests import factories
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


def test_show_lists_a_private_nodes_clusters_machines_and_their_nodes(
        portal_with_ready_cluster: Portal, portalctl: PortalCtl) -> None:
    portal = portal_with_ready_cluster
    with portal.database.transaction() as db:
        cluster = db.scalars(select(VirtualCluster).where(VirtualCluster.name == "train")).one()
        host = db.get(HostCluster, cluster.host_cluster_id)
        assert host is not None
        gpu = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S")
        cluster.placement, cluster.gpu_class_id, cluster.gpus = "private-nodes", gpu.id, 8
        factories.machine(db, host, gpu, "metal-a", cluster_id=cluster.id, desired="private",
                          phase="joined", node_name="metal-a")
    portalctl.login(portal, "acme-viewer")
    shown = portalctl("clusters", "show", "train")
    assert shown.exit_code == 0, shown.stderr
    [line] = [line for line in shown.stdout.splitlines() if line.startswith("metal-a")]
    assert line.split()[:4] == ["metal-a", "8", "joined", "metal-a"]
