"""Sleep and wake on the in-memory host: what the worker does to the host's objects, the
conditions and phases the tenant sees, and the audit trail."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.clusters import conditions as cond
from app.clusters.service import change_power
from app.database.core import Database
from app.kube.manifests import labels as lbl
from tests.clusters.support import Harness, create
from tests.support.tenancy import Tenancy, headers

NAMESPACE = "t-acme--train"


def synced_pod(name: str, gpus: int = 1) -> dict[str, Any]:
    """A pod vCluster's syncer made on the host for a workload of the virtual cluster."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-x-default-x-train", "namespace": NAMESPACE,
                         "labels": {lbl.VCLUSTER_SYNCED_MARKER: "train"}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {
                "limits": {lbl.GPU_RESOURCE: str(gpus)}}}]}}


def power(harness: Harness, tenancy: Tenancy, cluster_id: int, wanted: str) -> None:
    with harness.database.transaction() as db:
        change_power(db, tenancy.principal(tenancy.acme_admin), "acme", "train", wanted)
    harness.converge()


def gpu_queue(harness: Harness, name: str) -> dict[str, Any]:
    queue = harness.kube.get("scheduling.run.ai/v2", "Queue", name)
    assert queue is not None
    gpu: dict[str, Any] = queue["spec"]["resources"]["gpu"]
    return gpu


def actions(database: Database) -> list[str]:
    with database.session() as db:
        return list(db.scalars(select(AuditEvent.action).where(
            AuditEvent.action.like("virtual_cluster.%")).order_by(AuditEvent.id)))


def test_a_sleeping_cluster_stops_its_control_plane_removes_its_pods_and_frees_its_gpus(
        harness: Harness, tenancy: Tenancy) -> None:
    created = create(harness.database, tenancy, gpus=4)
    harness.converge()
    for name in ("trainer-0", "trainer-1"):
        harness.kube.seed(synced_pod(name))
    harness.kube.seed({**synced_pod("other"), "metadata": {"name": "coredns-x", "namespace":
                                                            NAMESPACE, "labels": {}}})
    power(harness, tenancy, created.id, "asleep")

    statefulset = harness.kube.get("apps/v1", "StatefulSet", "train", NAMESPACE)
    assert statefulset is not None and statefulset["spec"]["replicas"] == 0
    annotations = statefulset["metadata"]["annotations"]
    assert (annotations["loft.sh/paused"], annotations["loft.sh/paused-replicas"]) == ("true", "1")
    left = {p["metadata"]["name"] for p in harness.kube.list("v1", "Pod", NAMESPACE)}
    assert left == {"coredns-x"}  # only the syncer's pods go
    assert (gpu_queue(harness, "acme--train")["quota"], gpu_queue(harness, "acme")["quota"]) == (
        0, 16 - 4)
    quota = harness.kube.get("v1", "ResourceQuota", "tenant-quota", NAMESPACE)
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    assert harness.kube.get("v1", "Secret", "vc-train", NAMESPACE) is not None  # kept
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.asleep_since is not None
    asleep = cond.find(cluster.conditions, cond.ASLEEP)
    assert asleep is not None and asleep["status"] == "True" and "manual" in asleep["message"]
    assert not cond.is_true(cluster.conditions, cond.READY)
    assert actions(harness.database)[-2:] == ["virtual_cluster.sleep", "virtual_cluster.asleep"]
    assert harness.installer.installs == 1  # no helm run to sleep


def test_waking_restores_the_control_plane_and_the_guarantee(
        harness: Harness, tenancy: Tenancy) -> None:
    created = create(harness.database, tenancy, gpus=4)
    harness.converge()
    power(harness, tenancy, created.id, "asleep")
    power(harness, tenancy, created.id, "awake")
    statefulset = harness.kube.get("apps/v1", "StatefulSet", "train", NAMESPACE)
    assert statefulset is not None and statefulset["spec"]["replicas"] == 1
    assert "loft.sh/paused" not in (statefulset["metadata"].get("annotations") or {})
    assert (gpu_queue(harness, "acme--train")["quota"], gpu_queue(harness, "acme")["quota"]) == (
        4, 16)
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.asleep_since is None
    assert cond.is_true(cluster.conditions, cond.READY)
    assert not cond.is_true(cluster.conditions, cond.ASLEEP)
    assert actions(harness.database)[-3:] == [
        "virtual_cluster.wake", "virtual_cluster.awake", "virtual_cluster.ready"]


def test_a_sleep_stopped_half_way_is_finished_by_the_next_pass(
        harness: Harness, tenancy: Tenancy) -> None:
    created = create(harness.database, tenancy)
    harness.converge()
    statefulset = harness.kube.get("apps/v1", "StatefulSet", "train", NAMESPACE)
    assert statefulset is not None
    # The controller has not stopped the pod yet: the pass waits and comes back.
    harness.kube.seed({**statefulset, "status": {"replicas": 1}})
    with harness.database.transaction() as db:
        change_power(db, tenancy.principal(tenancy.acme_admin), "acme", "train", "asleep")
    harness.run()
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.asleep_since is None
    assert not cond.is_true(cluster.conditions, cond.ASLEEP)
    stopped = harness.kube.get("apps/v1", "StatefulSet", "train", NAMESPACE)
    assert stopped is not None
    harness.kube.seed({**stopped, "status": {"replicas": 0}})
    harness.clock.advance(60)
    harness.converge()
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.asleep_since is not None


def test_the_api_sleeps_and_wakes_for_tenant_admins_only_and_shows_the_phase(
        client: TestClient, harness: Harness, tenancy: Tenancy, db: Any) -> None:
    create(harness.database, tenancy)
    harness.converge()
    url = "/api/v1/tenants/acme/clusters/train"
    member = headers(db, tenancy.acme_member)
    assert client.post(f"{url}/sleep", headers=member).status_code == 403
    admin = headers(db, tenancy.acme_admin)
    asked = client.post(f"{url}/sleep", headers=admin)
    assert asked.status_code == 202, asked.text
    assert asked.json()["power"]["wanted"] == "asleep"
    assert asked.json()["phase"] == "Sleeping"
    harness.converge()
    shown = client.get(url, headers=member).json()
    assert shown["power"]["asleep_since"] is not None
    assert client.post(f"{url}/sleep", headers=admin).status_code == 202  # no change
    woken = client.post(f"{url}/wake", headers=admin).json()
    assert woken["phase"] == "Waking"
    harness.converge()
    assert client.get(url, headers=member).json()["phase"] == "Ready"
