"""KAI inside a dedicated-nodes cluster: once the KAI add-on is Ready, the portal makes a parent
queue for the cluster and a leaf queue per team (an IdP group mapped to admin or member) inside
the virtual cluster, quotas summing to the cluster's GPUs; shown as TeamQueuesApplied, repaired
when changed by hand, no writes when nothing changed. The virtual cluster is a real API server
with KAI's real Queue CRD (../shared/reference/kai-queue-crd.yaml)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import delete
from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.clusters.shapes import ClusterAddon
from app.database.core import Database
from app.kube.adapter import KubernetesAdapter
from app.kube.helm import InstallError
from app.kube.manifests import labels as lbl
from app.kube.manifests.team_queues import split, team_label, teams
from app.kube.port import KubePort
from app.tenants.models import GroupMapping
from tests import factories
from tests.clusters.support import Harness, create
from tests.support.kube import RecordingPort
from tests.support.kube_server import install_crds
from tests.support.paths import KAI_QUEUE_CRD
from tests.support.tenancy import Tenancy

KAI = ClusterAddon(name="kai-scheduler", repo="oci://ghcr.io/nvidia/kai-scheduler",
                   chart="kai-scheduler", version="v0.9.3")
TEAM_QUEUES = cond.TEAM_QUEUES


def test_teams_are_the_groups_that_may_run_workloads() -> None:
    mapped = [("ml-research", "member"), ("Vision_Team", "admin"), ("auditors", "viewer"),
              ("ml-research", "admin")]
    assert teams(mapped) == ["Vision_Team", "ml-research"]
    assert teams([("auditors", "viewer")]) == ["default"]
    assert team_label("ml-research") == "ml-research"
    # Not a DNS label: cleaned, with a hash so that "Vision_Team" and "vision-team" differ.
    assert team_label("Vision_Team").startswith("vision-team-")
    assert team_label("Vision_Team") != team_label("vision-team")
    assert team_label("CN=Ops,OU=Groups").startswith("cn-ops-ou-groups-")
    assert split(8, 3) == [3, 3, 2] and sum(split(7, 7)) == 7 and split(0, 2) == [0, 0]


class VirtualConnector:
    """The host in memory (the harness's); every virtual cluster is the real test API server,
    its calls recorded."""

    def __init__(self, inner: Any, port: RecordingPort) -> None:
        self.inner = inner
        self.port = port

    def host(self) -> KubePort | None:
        return self.inner.host()  # type: ignore[no-any-return]

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return self.port

    def ready(self, kubeconfig_yaml: str) -> bool:
        return self.inner.ready(kubeconfig_yaml)  # type: ignore[no-any-return]


@pytest.fixture
def kai_virtual(virtual: KubernetesAdapter) -> Iterator[KubernetesAdapter]:
    install_crds(virtual, KAI_QUEUE_CRD)
    yield virtual
    for queue in sorted(virtual.list(lbl.KAI_API_VERSION, "Queue", label_selector=lbl.managed()),
                        key=lambda q: "parentQueue" not in q["spec"]):
        virtual.delete(lbl.KAI_API_VERSION, "Queue", queue["metadata"]["name"])


@pytest.fixture
def dedicated(db: Session, tenancy: Tenancy) -> Tenancy:
    """acme gets an 8-GPU node and three mapped groups (one of them viewers)."""
    node = factories.node(db, factories.env_host(db), tenancy.h100, gpu_count=8)
    factories.assignment(db, node, tenancy.acme)
    for group, role in (("ml-research", "member"), ("Vision_Team", "admin"),
                        ("auditors", "viewer")):
        db.add(GroupMapping(tenant_id=tenancy.acme.id, group_name=group, role=role))
    db.commit()
    return tenancy


def kai_cluster(harness: Harness, tenancy: Tenancy, placement: str = "dedicated-nodes",
                gpus: int = 8) -> int:
    created = create(harness.database, tenancy, placement=placement, gpus=gpus)
    with harness.database.transaction() as db:
        cluster = db.get(VirtualCluster, created.id)
        assert cluster is not None
        cluster.addons = [KAI.as_json()]
    return created.id


def queues(port: KubePort) -> dict[str, dict[str, Any]]:
    return {q["metadata"]["name"]: q["spec"] for q in port.list(
        lbl.KAI_API_VERSION, "Queue", label_selector=lbl.managed())}


def condition(harness: Harness, cluster_id: int) -> dict[str, Any] | None:
    cluster = harness.cluster(cluster_id)
    assert cluster is not None
    return cond.find(cluster.conditions, TEAM_QUEUES)


def test_team_queues_are_made_inside_once_kai_is_ready_and_left_alone_after(
        database: Database, dedicated: Tenancy, kai_virtual: KubernetesAdapter) -> None:
    harness = Harness.build(database)
    recorded = RecordingPort(kai_virtual)
    harness.reconciler.connector = VirtualConnector(harness.connector, recorded)
    harness.installer.addon_failures.append(InstallError("helm upgrade failed: timeout"))
    cluster_id = kai_cluster(harness, dedicated)

    for _ in range(5):  # until the KAI install has failed once: no queues yet
        harness.run()
        kai = cond.find(harness.cluster(cluster_id).conditions,  # type: ignore[union-attr]
                        cond.addon_type("kai-scheduler"))
        if kai is not None:
            break
    assert kai is not None and kai["status"] == "False"
    waiting = condition(harness, cluster_id)
    assert waiting is not None and waiting["reason"] == "WaitingForAddon"
    assert queues(kai_virtual) == {}

    harness.converge(3)
    vision = f"train-{team_label('Vision_Team')}"
    found = queues(kai_virtual)
    assert set(found) == {"train", vision, "train-ml-research"}
    assert "parentQueue" not in found["train"]
    assert found["train"]["resources"]["gpu"] == {"quota": 8, "limit": 8, "overQuotaWeight": 1}
    leaves = [found[vision], found["train-ml-research"]]
    assert all(leaf["parentQueue"] == "train" for leaf in leaves)
    assert sum(leaf["resources"]["gpu"]["quota"] for leaf in leaves) == 8
    assert found[vision]["displayName"] == "Vision_Team"
    shown = condition(harness, cluster_id)
    assert shown is not None and shown["status"] == "True"
    assert shown["message"] == (f"queue train (8 GPUs); team queues: {vision} 4, "
                                "train-ml-research 4")

    recorded.calls.clear()
    harness.converge(2)
    assert recorded.writes == []

    # Changed by hand: the next resync puts it back.
    kai_virtual.apply({**_queue_of(kai_virtual, "train-ml-research"),
                       "spec": {**found["train-ml-research"], "resources": {
                           **found["train-ml-research"]["resources"],
                           "gpu": {"quota": 8, "limit": 8, "overQuotaWeight": 1}}}},
                      force=True)
    harness.converge(1)
    assert queues(kai_virtual)["train-ml-research"]["resources"]["gpu"]["quota"] == 4


def test_a_team_that_goes_loses_its_queue_and_the_others_share_the_gpus(
        database: Database, dedicated: Tenancy, kai_virtual: KubernetesAdapter) -> None:
    harness = Harness.build(database)
    harness.reconciler.connector = VirtualConnector(harness.connector,
                                                    RecordingPort(kai_virtual))
    kai_cluster(harness, dedicated)
    harness.converge(3)
    with database.transaction() as db:
        db.execute(delete(GroupMapping).where(GroupMapping.group_name == "Vision_Team"))
    harness.converge(2)
    found = queues(kai_virtual)
    assert set(found) == {"train", "train-ml-research"}
    assert found["train-ml-research"]["resources"]["gpu"]["quota"] == 8


def test_a_shared_pool_cluster_with_kai_gets_no_team_queues(
        database: Database, dedicated: Tenancy, kai_virtual: KubernetesAdapter) -> None:
    harness = Harness.build(database)
    harness.reconciler.connector = VirtualConnector(harness.connector,
                                                    RecordingPort(kai_virtual))
    cluster_id = kai_cluster(harness, dedicated, placement="shared-pool", gpus=2)
    harness.converge(3)
    assert harness.installer.addons == {"kai-scheduler": KAI}
    assert condition(harness, cluster_id) is None
    assert queues(kai_virtual) == {}


def _queue_of(port: KubePort, name: str) -> dict[str, Any]:
    live = port.get(lbl.KAI_API_VERSION, "Queue", name)
    assert live is not None
    return {"apiVersion": lbl.KAI_API_VERSION, "kind": "Queue",
            "metadata": {"name": name, "labels": live["metadata"]["labels"]}}
