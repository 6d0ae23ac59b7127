"""The cluster reconciler against real API servers: the host is etcd + kube-apiserver 1.32 +
kube-controller-manager with KAI's Queue CRD, and a second kube-apiserver plays the virtual
cluster whose admin kubeconfig (TLS, client certificate) the stand-in installer leaves in
Secret vc-<release>.

What the emulator cannot show: every object the portal applies passes the real schemas and
admission and is then enforced (Pod Security, quota, the queue guard's CEL), the server's
canonical quantities do not make a resync write, drift made by someone else is taken back, a
namespace deleted by hand is waited for while it terminates and then made again, and deletion
waits until the controller-manager has finalised the namespace.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import service
from app.clusters.desired import manifest_policy
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate, ClusterOut, ClusterResize
from app.database.core import Database
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kube import manifests
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.helm import InstallError
from app.kube.manifests import labels as lbl
from app.kube.manifests.admission import POLICY_NAME as GUARD
from app.kube.port import Manifest
from app.reconcilers.clusters import ClusterReconciler
from tests import factories
from tests.clusters.cleanup import own_objects
from tests.clusters.support import Clock, cluster_settings
from tests.support.drive import run_due
from tests.support.installers import FakeInstaller
from tests.support.kube import Call, RecordingConnector
from tests.support.kube_server import ApiServer
from tests.support.kubectl import Kubectl, KubectlError
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kube_server

QUEUE = lbl.KAI_API_VERSION
NETPOL = "networking.k8s.io/v1"
ADMISSION = "admissionregistration.k8s.io/v1"
STEPS = [*cond.STEP_TYPES, cond.READY]
H100 = "NVIDIA-H100-80GB-HBM3"
DELETE_TIMEOUT = 90.0


# ----- the host, once per module


@dataclass
class Host:
    api: ApiServer
    admin: KubernetesAdapter  # to look at what is stored, as an operator would
    kubectl: Kubectl  # someone else editing by hand
    workdir: Path


@pytest.fixture(scope="module")
def host(kai_host: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    admin = kai_host.adapter()
    workdir = tmp_path_factory.mktemp("real-clusters")
    kubectl = Kubectl(kai_host, workdir / "kubectl", manager="kubectl-edit")
    yield Host(kai_host, admin, kubectl, workdir)
    # The platform objects every cluster shares (root queue, queue guard) were made here too.
    admin.delete(QUEUE, "Queue", "tenants")
    admin.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", GUARD)
    admin.delete(ADMISSION, "ValidatingAdmissionPolicy", GUARD)
    kubectl.close()
    admin.close()


# ----- a tenant of its own per test, and the worker


@dataclass
class Tenant:
    slug: str
    principal: Principal
    gpu_class_id: int


@pytest.fixture
def tenant(host: Host, database: Database) -> Iterator[Tenant]:
    """A tenant with a unique slug (the servers are shared by the run), 32 approved H100s, 16 of
    them on two dedicated H100 nodes in the inventory (so 16 for the shared pool); whatever a
    failed test left is removed after."""
    slug = f"rt-{secrets.token_hex(3)}"
    with database.transaction() as db:
        row = factories.tenant(db, slug, display_name=f"Real {slug}")
        admin = factories.user(db)
        factories.membership(db, row, admin, "admin")
        h100 = factories.gpu_class(db, H100, display_name="H100 80GB")
        factories.quota(db, row, h100, 32)
        inventory = factories.env_host(db)
        for _ in range(2):
            factories.assignment(db, factories.node(db, inventory, h100, gpu_count=8), row)
        found = Tenant(slug, Principal(user=admin, via="token", roles={row.id: "admin"}),
                       h100.id)
    yield found
    selector = {lbl.TENANT: slug}
    for namespace in host.admin.list("v1", "Namespace", label_selector=selector):
        host.admin.delete("v1", "Namespace", namespace["metadata"]["name"])
    for queue in host.admin.list(QUEUE, "Queue", label_selector=selector):
        host.admin.delete(QUEUE, "Queue", queue["metadata"]["name"])


def vcluster_release(kubectl: Kubectl, admin_kubeconfig: str) -> FakeInstaller:
    """Plays helm: installing brings up Secret vc-<release> holding the virtual cluster's
    admin kubeconfig (the second real API server), written as helm would, not as the portal."""

    def bring_up(release: str, namespace: str) -> None:
        config = base64.b64encode(admin_kubeconfig.encode()).decode()
        try:
            kubectl.apply({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": f"vc-{release}", "namespace": namespace,
                             "labels": {"app": "vcluster", "release": release}},
                "data": {"config": config},
            })
        except KubectlError as error:  # as HelmInstaller reports a failed helm run
            raise InstallError(f"helm upgrade failed: {error.message}") from error

    def take_down(release: str, namespace: str) -> None:
        kubectl.delete("v1", "Secret", f"vc-{release}", namespace)

    return FakeInstaller(brings_up=bring_up, takes_down=take_down)


@dataclass
class Worker:
    database: Database
    settings: Settings
    connector: RecordingConnector
    installer: FakeInstaller
    clock: Clock
    reconciler: ClusterReconciler
    # The virtual cluster's admin kubeconfig, as helm leaves it on the host.
    admin_kubeconfig: str

    def run(self) -> int:
        """One pass, later than any backoff, lease or resync."""
        self.clock.advance(301)
        return run_due(self.reconciler, "worker-1")

    def cluster(self, cluster_id: int) -> VirtualCluster | None:
        with self.database.session() as db:
            return db.scalar(select(VirtualCluster).where(VirtualCluster.id == cluster_id))


@pytest.fixture
def worker(host: Host, virtual_api: ApiServer, database: Database) -> Iterator[Worker]:
    kubeconfig = host.api.write_admin_kubeconfig(host.workdir / "host.kubeconfig")
    settings = cluster_settings(kubeconfig=str(kubeconfig))
    connector = RecordingConnector(ClientConnector(settings))
    helm = Kubectl(host.api, host.workdir / "helm", manager="helm")
    # Read once: each read of the server's admin kubeconfig is a new credential.
    admin_kubeconfig = virtual_api.admin_kubeconfig
    installer = vcluster_release(helm, admin_kubeconfig)
    clock = Clock()
    reconciler = ClusterReconciler(settings, database, connector, installer, clock=clock,
                                   wait_seconds=0.5)
    yield Worker(database, settings, connector, installer, clock, reconciler, admin_kubeconfig)
    helm.close()


# ----- helpers


def create(worker: Worker, tenant: Tenant, *, placement: str = "shared-pool", gpus: int = 4,
           memory_mib: int = 524288) -> ClusterOut:
    payload = ClusterCreate(name="train", placement=placement, gpu_class_id=tenant.gpu_class_id,
                            gpus=gpus, cpu_millicores=8000, memory_mib=memory_mib)
    with worker.database.transaction() as db:
        return service.create_cluster(db, tenant.principal, worker.settings, tenant.slug,
                                      payload)


def converge(worker: Worker, cluster_id: int, passes: int = 3) -> VirtualCluster:
    seen: list[dict[str, Any]] = []
    for _ in range(passes):
        worker.run()
        cluster = worker.cluster(cluster_id)
        assert cluster is not None
        seen = list(cluster.conditions or [])
        if cond.is_true(seen, cond.READY) and cluster.observed_generation == cluster.generation:
            return cluster
    raise AssertionError(f"not Ready after {passes} passes: {seen}")


def conditions_of(worker: Worker, cluster_id: int) -> list[dict[str, Any]]:
    cluster = worker.cluster(cluster_id)
    assert cluster is not None
    return list(cluster.conditions or [])


def statuses(cluster: VirtualCluster) -> dict[str, str]:
    return {c["type"]: c["status"] for c in cluster.conditions}


def stored(host: Host, api_version: str, kind: str, name: str,
           namespace: str | None = None) -> Manifest:
    found = host.admin.get(api_version, kind, name, namespace)
    assert found is not None, f"{kind} {name} is not on the server"
    return found


def resource_versions(host: Host, slug: str) -> dict[str, str]:
    return {f"{kind}/{name}": stored(host, v, kind, name, ns)["metadata"]["resourceVersion"]
            for v, kind, name, ns in own_objects(slug)}


def quota_counted(host: Host, namespace: str) -> dict[str, Any]:
    """The ResourceQuota once the controller-manager has written its status (it bumps the
    resourceVersion once; only after that are versions a measure of the portal's writes)."""
    def counted() -> dict[str, Any] | None:
        quota = stored(host, "v1", "ResourceQuota", "tenant-quota", namespace)
        return quota if (quota.get("status") or {}).get("hard") == quota["spec"]["hard"] else None

    return wait_for(counted, "the quota controller to count the namespace", timeout=30)


def wait_for_service_account(host: Host, namespace: str) -> None:
    """The controller-manager makes ServiceAccount default, without which no pod is admitted."""
    wait_for(lambda: host.admin.get("v1", "ServiceAccount", "default", namespace),
             "the default ServiceAccount", timeout=30)


def wait_until_emptied(host: Host, namespace: str) -> None:
    """The controller-manager has removed what it can from a terminating namespace."""
    wait_for(lambda: host.admin.get("v1", "ResourceQuota", "tenant-quota", namespace) is None,
             "the namespace to be emptied", timeout=30)


def delete_until_gone(worker: Worker, tenant: Tenant, cluster_id: int) -> None:
    """Ask for deletion, then run passes until the row is gone (the controller-manager
    finalises the namespace in a few seconds)."""
    with worker.database.transaction() as db:
        service.delete_cluster(db, tenant.principal, tenant.slug, "train")
    deadline = time.monotonic() + DELETE_TIMEOUT
    while worker.cluster(cluster_id) is not None:
        assert time.monotonic() < deadline, "the cluster row outlived the namespace timeout"
        worker.run()
        time.sleep(0.5)


# ----- the tests


@pytest.mark.parametrize("placement", ["shared-pool", "dedicated-nodes"])
def test_a_new_cluster_becomes_ready_with_every_object_on_the_server(
    host: Host, worker: Worker, tenant: Tenant, placement: str
) -> None:
    created = create(worker, tenant, placement=placement)
    cluster = converge(worker, created.id)
    assert statuses(cluster) == dict.fromkeys(STEPS, "True")
    assert cluster.observed_generation == cluster.generation == 1
    assert all(c["observedGeneration"] == 1 for c in cluster.conditions)

    namespace = f"t-{tenant.slug}--train"
    labels = stored(host, "v1", "Namespace", namespace)["metadata"]["labels"]
    assert labels[f"{lbl.PSA_PREFIX}enforce"] == "restricted"
    assert labels[f"{lbl.PSA_PREFIX}enforce-version"] == "latest"
    assert (labels[lbl.TENANT], labels[lbl.PLACEMENT]) == (tenant.slug, placement)
    quota = quota_counted(host, namespace)
    # applied as 524288Mi and 8000m: the server keeps its canonical form
    assert quota["spec"]["hard"] == {
        "limits.memory": "512Gi", "limits.nvidia.com/gpu": "4", "pods": "200",
        "requests.cpu": "8", "requests.memory": "512Gi", "requests.nvidia.com/gpu": "4",
        "services.loadbalancers": "0", "services.nodeports": "0"}
    limits = stored(host, "v1", "LimitRange", "tenant-defaults", namespace)["spec"]["limits"]
    assert [item["type"] for item in limits] == ["Container"]
    policies = {p["metadata"]["name"]: p["spec"]
                for p in host.admin.list(NETPOL, "NetworkPolicy", namespace)}
    assert sorted(policies) == ["tenant-isolation", "vcluster-api-server"]
    assert policies["tenant-isolation"]["policyTypes"] == ["Ingress"]
    parent = stored(host, QUEUE, "Queue", tenant.slug)["spec"]
    leaf = stored(host, QUEUE, "Queue", f"{tenant.slug}--train")["spec"]
    assert (parent["parentQueue"], parent["resources"]["gpu"]["quota"]) == ("tenants", 16)
    assert leaf["parentQueue"] == tenant.slug
    assert leaf["resources"]["gpu"] == {"quota": 4, "limit": 4, "overQuotaWeight": 1}
    assert stored(host, QUEUE, "Queue", "tenants")["spec"]["resources"]["gpu"]["quota"] == -1
    # Ready means the second API server answered /readyz through the stored kubeconfig
    assert cluster.admin_kubeconfig_encrypted is not None
    opened = SecretBox(worker.settings.encryption_key).open(cluster.admin_kubeconfig_encrypted)
    assert opened == worker.admin_kubeconfig

    versions = resource_versions(host, tenant.slug)
    worker.connector.forget()
    # The cluster, its tenant's queue and its host's shared objects.
    assert worker.run() == 3
    assert worker.connector.writes == []
    assert resource_versions(host, tenant.slug) == versions
    # The cluster: one LIST per kind, by the portal's label across all namespaces, and one GET,
    # the Secret; the tenant's queue and the shared objects: a GET each.
    shared = manifests.platform_objects(manifest_policy(worker.settings))
    assert sorted(worker.connector.calls) == sorted([
        Call("get", "Secret", "vc-train"), *(Call("list", kind, "") for kind in (
            "Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy", "Queue",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")),
        Call("get", "Queue", tenant.slug),
        *(Call("get", obj["kind"], obj["metadata"]["name"]) for obj in shared)])
    assert worker.installer.calls == [("install", "train", namespace)]

    delete_until_gone(worker, tenant, created.id)


def test_resize_updates_quota_and_leaf_queue_on_the_server(
    host: Host, worker: Worker, tenant: Tenant
) -> None:
    created = create(worker, tenant)
    converge(worker, created.id)
    with worker.database.transaction() as db:
        service.resize_cluster(db, tenant.principal, tenant.slug, "train",
                               ClusterResize(gpus=8, memory_mib=1048576))
    cluster = converge(worker, created.id)
    assert cluster.observed_generation == cluster.generation == 2

    namespace = f"t-{tenant.slug}--train"
    hard = quota_counted(host, namespace)["spec"]["hard"]
    assert (hard["requests.nvidia.com/gpu"], hard["limits.nvidia.com/gpu"]) == ("8", "8")
    assert hard["requests.memory"] == "1Ti"
    leaf = stored(host, QUEUE, "Queue", f"{tenant.slug}--train")["spec"]["resources"]
    assert leaf["gpu"] == {"quota": 8, "limit": 8, "overQuotaWeight": 1}
    assert leaf["memory"]["quota"] == 1099512  # MB, as KAI counts memory
    assert [call[0] for call in worker.installer.calls] == ["install", "install"]

    worker.connector.forget()
    worker.run()
    assert worker.connector.writes == []

    delete_until_gone(worker, tenant, created.id)


def test_drift_made_by_hand_is_taken_back_on_resync(
    host: Host, worker: Worker, tenant: Tenant
) -> None:
    created = create(worker, tenant)
    converge(worker, created.id)
    namespace = f"t-{tenant.slug}--train"
    quota_counted(host, namespace)
    kubectl = host.kubectl
    kubectl.merge_patch("v1", "ResourceQuota", "tenant-quota", namespace,
                        {"spec": {"hard": {"requests.nvidia.com/gpu": "99"}}})
    kubectl.merge_patch("v1", "Namespace", namespace, None, {
        "metadata": {"labels": {f"{lbl.PSA_PREFIX}enforce": "privileged"}}})
    assert kubectl.delete(NETPOL, "NetworkPolicy", "tenant-isolation", namespace)
    kubectl.merge_patch(QUEUE, "Queue", f"{tenant.slug}--train", None,
                        {"spec": {"resources": {"gpu": {"limit": 64}}}})
    worker.connector.forget()

    worker.run()
    assert sorted(worker.connector.writes) == [
        ("apply", "Namespace", namespace), ("apply", "NetworkPolicy", "tenant-isolation"),
        ("apply", "Queue", f"{tenant.slug}--train"), ("apply", "ResourceQuota", "tenant-quota")]
    hard = stored(host, "v1", "ResourceQuota", "tenant-quota", namespace)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "4"
    labels = stored(host, "v1", "Namespace", namespace)["metadata"]["labels"]
    assert labels[f"{lbl.PSA_PREFIX}enforce"] == "restricted"
    assert stored(host, NETPOL, "NetworkPolicy", "tenant-isolation", namespace)
    leaf = stored(host, QUEUE, "Queue", f"{tenant.slug}--train")["spec"]["resources"]
    assert leaf["gpu"]["limit"] == 4
    cluster = worker.cluster(created.id)
    assert cluster is not None and statuses(cluster) == dict.fromkeys(STEPS, "True")

    worker.connector.forget()
    worker.run()
    assert worker.connector.writes == []

    delete_until_gone(worker, tenant, created.id)


def test_deletion_waits_for_the_namespace_to_be_finalised(
    host: Host, worker: Worker, tenant: Tenant
) -> None:
    created = create(worker, tenant)
    converge(worker, created.id)
    namespace = f"t-{tenant.slug}--train"
    # the controller-manager puts its own objects in the namespace: it must empty it first
    wait_for_service_account(host, namespace)
    with worker.database.transaction() as db:
        service.delete_cluster(db, tenant.principal, tenant.slug, "train")

    worker.run()
    terminating = stored(host, "v1", "Namespace", namespace)
    assert terminating["status"]["phase"] == "Terminating"
    cluster = worker.cluster(created.id)
    assert cluster is not None
    ready = cond.find(cluster.conditions, cond.READY)
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "Deleting")
    assert cond.find(cluster.conditions, cond.FAILED) is None

    delete_until_gone(worker, tenant, created.id)
    for api_version, kind, name, ns in own_objects(tenant.slug):
        assert host.admin.get(api_version, kind, name, ns) is None, f"{kind} {name} remains"
    assert worker.installer.calls[-1] == ("uninstall", "train", namespace)


def synced_pod(namespace: str, name: str, queue: str, *, gpus: int = 1,
               hardened: bool = True) -> Manifest:
    """A pod as vCluster's syncer writes it to the host; unless ``hardened``, it runs as
    most images do (as root, default capabilities), which Pod Security restricted refuses."""
    security: dict[str, Any] = {}
    if hardened:
        security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                    "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {lbl.VCLUSTER_SYNCED_MARKER: "train",
                                lbl.KAI_QUEUE_LABEL: queue}},
        "spec": {"schedulerName": lbl.KAI_SCHEDULER_NAME, "containers": [{
            "name": "train", "image": "registry.example.com/train:1",
            "resources": {"limits": {lbl.GPU_RESOURCE: str(gpus)}},
            "securityContext": security}]},
    }


def refused(kubectl: Kubectl, pod: Manifest) -> KubectlError:
    """The server's refusal of ``pod``; an admission policy only just created may still let
    one through for a moment, so an admitted pod is removed and tried again."""
    deadline = time.monotonic() + 15
    while True:
        try:
            kubectl.create(pod)
        except KubectlError as error:
            return error
        meta = pod["metadata"]
        kubectl.delete("v1", "Pod", meta["name"], meta["namespace"])
        assert time.monotonic() < deadline, f"pod {meta['name']} was admitted"
        time.sleep(0.5)


def test_the_host_enforces_what_the_portal_applied(
    host: Host, worker: Worker, tenant: Tenant
) -> None:
    created = create(worker, tenant)
    converge(worker, created.id)
    namespace, queue = f"t-{tenant.slug}--train", f"{tenant.slug}--train"
    quota_counted(host, namespace)  # quota admission refuses every pod until it is counted
    wait_for_service_account(host, namespace)
    syncer = Kubectl(host.api, host.workdir / "syncer", manager="vcluster")
    try:
        other_queue = refused(syncer, synced_pod(namespace, "borrows", f"{tenant.slug}--other"))
        assert other_queue.status == 403
        assert "gpu-tenant-portal-kai-queue-guard" in other_queue.message
        assert "their own leaf queue" in other_queue.message
        as_root = refused(syncer, synced_pod(namespace, "root", queue, hardened=False))
        assert as_root.status == 403 and 'PodSecurity "restricted:latest"' in as_root.message

        admitted = syncer.create(synced_pod(namespace, "fits", queue, gpus=4))
        assert admitted["spec"]["containers"][0]["resources"]["requests"] == {
            "cpu": "100m", "memory": "256Mi", lbl.GPU_RESOURCE: "4"}  # the LimitRange defaults
        over_quota = refused(syncer, synced_pod(namespace, "more", queue))
        assert over_quota.status == 403 and "exceeded quota: tenant-quota" in over_quota.message
    finally:
        syncer.close()

    delete_until_gone(worker, tenant, created.id)  # the namespace goes with its pod


def test_a_namespace_deleted_by_hand_is_made_again(
    host: Host, worker: Worker, tenant: Tenant
) -> None:
    created = create(worker, tenant)
    converge(worker, created.id)
    namespace = f"t-{tenant.slug}--train"
    # an object whose finalizer holds the namespace in Terminating (as pvc-protection holds
    # the control plane's volume until its pod is gone)
    hold = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "data", "namespace": namespace,
                         "finalizers": ["example.com/hold"]}}
    host.kubectl.create(hold)
    assert host.kubectl.delete("v1", "Namespace", namespace)
    wait_until_emptied(host, namespace)

    for _ in range(2):  # the first pass sees it terminating, the second is a retry
        worker.run()
        conditions = conditions_of(worker, created.id)
        waiting = cond.find(conditions, cond.NAMESPACE_READY) or {}
        assert (waiting.get("status"), waiting.get("reason")) == ("False", "NamespaceTerminating")
        assert not cond.is_true(conditions, cond.READY)
        assert not cond.is_true(conditions, cond.FAILED)  # it waits; nothing failed

    host.kubectl.merge_patch("v1", "ConfigMap", "data", namespace,
                             {"metadata": {"finalizers": None}})
    deadline = time.monotonic() + DELETE_TIMEOUT
    while not cond.is_true(conditions_of(worker, created.id), cond.READY):
        assert time.monotonic() < deadline, f"not made again: {conditions_of(worker, created.id)}"
        time.sleep(0.5)
        worker.run()
    for api_version, kind, name, ns in own_objects(tenant.slug):
        assert stored(host, api_version, kind, name, ns)
    assert [call[0] for call in worker.installer.calls] == ["install", "install"]
    delete_until_gone(worker, tenant, created.id)
