"""The worker's RBAC (deploy/kubernetes/base/rbac-worker.yaml) proven on a real API server.

The ClusterRoles, Role and bindings the base renders are applied to the host (etcd +
kube-apiserver + controller-manager, KAI's Queue CRD) for a ServiceAccount of their own; the
worker's reconcilers then run authenticated only with that ServiceAccount's token (a
TokenRequest): node assignment, the admission webhook's certificate and registration, a
cluster's creation, resize and deletion, and the GPU use samples taken on every pass; then a
bare-metal machine (Metal3's CRDs installed; the admin plays the baremetal-operator's status
reports) registered, provisioned with a bootstrap token and a join endpoint read from
kube-public/cluster-info, joined by its Node, released and removed. A verb missing from the
roles makes the run fail on a 403; a request that only the helm role allows (it is broad: a
Secret in any namespace) fails too; a verb, resource name or namespace in the roles that no
request needed fails the comparison test.

helm is the stand-in (tests/clusters/standin_helm.py), run by the real HelmInstaller with the
ServiceAccount's kubeconfig: it writes the StatefulSet and the Secret vc-<release> as the
worker, but not what the real vCluster chart makes. What only the real chart needs is the
helm ClusterRole, compared with the commented allowlist below. Kubeconfig issue and revoke
happen on the virtual cluster, with its own admin kubeconfig: no host call is made for them.

The admission webhook's roles are proven the same way: it loads its key pair, switches to a new
one once the registration trusts it, and reads a namespace's labels as its ServiceAccount.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from sqlalchemy import select

from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import service
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate, ClusterResize
from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.hosts.health import ADMISSION_WEBHOOK, API_REACHABLE, KAI_QUEUE_CRD, run_checks
from app.kit.config import Settings
from app.kube import manifests
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.errors import KubeError
from app.kube.manifests import ManifestPolicy
from app.kube.manifests import baremetal as metal3
from app.kube.manifests import labels as lbl
from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_NAME
from app.kube.manifests.webhook import TLS_SECRET_NAME
from app.kube.port import HostProbe, KubePort, Manifest, ObjectRef, kind_info
from app.machines import join
from app.machines import service as machines_service
from app.machines.models import Machine
from app.nodes.models import Node, NodeAssignment
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.machines import MachineReconciler
from app.reconcilers.nodes import NodeReconciler
from app.reconcilers.template_validation import TemplateValidator
from app.reconcilers.usage import UsageSampler
from app.reconcilers.webhook import WebhookReconciler
from app.templates.models import ClusterTemplate, ClusterTemplateVersion
from app.webhook.server import NamespaceLabels, ServingCertificate
from app.workqueue import MACHINES, enqueue
from tests import factories
from tests.clusters.cleanup import own_objects, remove_tenant_objects
from tests.clusters.standin_helm import use_standin_helm
from tests.clusters.support import Clock, cluster_settings
from tests.deploy.kustomize import BASE, WORKER_HELM, find, render
from tests.deploy.rbac import (
    BINDINGS,
    Grant,
    Pair,
    Request,
    covered,
    pairs,
    unasked,
    worker_pairs,
    worker_roles,
)
from tests.kube.test_baremetal_real import metal3_host as metal3_host  # a fixture
from tests.nodes.conftest import Later
from tests.support.drive import run_due
from tests.support.kube_server import ApiServer, fast_adapter
from tests.support.kubectl import Kubectl
from tests.templates.support import StandinCharts, training

pytestmark = pytest.mark.kube_server

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC = f"{RBAC_GROUP}/v1"
ADMISSION = "admissionregistration.k8s.io/v1"
H100 = "NVIDIA-H100-80GB-HBM3"
BMH = (metal3.METAL3_API_VERSION, metal3.BAREMETAL_HOST)
MACHINES_NS = metal3.MACHINES_NAMESPACE
DELETE_TIMEOUT = 90.0
T = TypeVar("T")

# What only helm and the real vCluster chart (PORTAL_VCLUSTER_CHART_VERSION, with the values of
# app/kube/manifests/vcluster.py) need; the stand-in cannot show it. Keep in step with the
# gpu-tenant-portal-worker-helm ClusterRole.
_ALL = ("get", "list", "watch", "create", "update", "patch", "delete")
_READ = ("get", "list", "watch")
HELM_ALLOWLIST: frozenset[Pair] = frozenset({
    # helm's release records are Secrets; the chart makes ConfigMaps (CoreDNS, config), the
    # API Services, ServiceAccounts, and from `policies:` a ResourceQuota, a LimitRange and
    # NetworkPolicies; helm reads, creates, patches (upgrade) and deletes (uninstall) each
    *((group, resource, verb) for group, resource in (
        ("", "configmaps"), ("", "secrets"), ("", "services"), ("", "serviceaccounts"),
        ("", "resourcequotas"), ("", "limitranges"), ("", "persistentvolumeclaims"),
        ("apps", "statefulsets"), ("networking.k8s.io", "networkpolicies"),
        ("rbac.authorization.k8s.io", "roles"), ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        # the chart's Role grants the syncer these; RBAC lets the worker create that Role only
        # if it holds them itself (it has neither `escalate` nor `bind`)
        ("", "pods"), ("", "pods/attach"), ("", "pods/portforward"), ("", "pods/exec"),
    ) for verb in _ALL),
    *(("", resource, verb) for resource in ("pods/status", "pods/ephemeralcontainers")
      for verb in ("update", "patch")),
    *(("", "pods/log", verb) for verb in _READ),
    # the syncer's API Services: endpoints and EndpointSlices it writes, events it records
    *(("", "endpoints", verb) for verb in _ALL),
    *(("discovery.k8s.io", "endpointslices", verb) for verb in _ALL),
    *(("", "events", verb) for verb in (*_READ, "create")),
    *(("apps", resource, verb) for resource in ("replicasets", "deployments") for verb in _READ),
    # the chart's ClusterRole: host nodes synced in (with the kubelet metrics and stats served
    # through them), and the virtual scheduler (dedicated nodes)
    *(("", resource, verb) for resource in (
        "nodes", "nodes/status", "nodes/metrics", "nodes/stats", "nodes/proxy") for verb in _READ),
    *(("storage.k8s.io", resource, verb) for resource in (
        "storageclasses", "csinodes", "csidrivers", "csistoragecapacities") for verb in _READ),
})


# ----- recording what the worker asks of the host


class Recorder:
    """A ``KubePort`` recording every request as the API server authorises it: a server-side
    apply is `patch`, and also `create` when the object is new (looked up with the admin's
    rights, not the worker's); a binding's apply is also `bind` on the role it names (checked
    first, on every write of a binding). 403s are kept apart."""

    def __init__(self, inner: KubePort, admin: KubePort) -> None:
        self.inner = inner
        self.admin = admin
        self.requests: set[Request] = set()
        self.forbidden: set[Pair] = set()

    @property
    def used(self) -> set[Pair]:
        return {request[1:4] for request in self.requests}

    def _call(self, requests: set[Request], call: Callable[[], T]) -> T:
        self.requests |= requests
        try:
            return call()
        except KubeError as error:
            if error.status == 403:
                self.forbidden |= {request[1:4] for request in requests}
            raise

    @staticmethod
    def _request(api_version: str, kind: str, verb: str, name: str = "",
                 namespace: str | None = None) -> Request:
        info = kind_info(api_version, kind)
        return (namespace or "", info.group, info.plural, verb, name)

    def _writes(self, obj: Manifest) -> set[Request]:
        ref = ObjectRef.of(obj)
        verbs = {"patch"}
        if self.admin.get(ref.api_version, ref.kind, ref.name, ref.namespace) is None:
            verbs.add("create")
        found = {self._request(ref.api_version, ref.kind, v, ref.name, ref.namespace)
                 for v in verbs}
        if ref.kind in BINDINGS:
            role = obj["roleRef"]
            found.add(self._request(RBAC, role["kind"], "bind", role["name"], ref.namespace))
        return found

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        return self._call(self._writes(obj), lambda: self.inner.apply(obj, force=force))

    def dry_run_apply(self, obj: Manifest) -> Manifest:
        """Authorised as the apply it would be (template validation's host checks)."""
        assert isinstance(self.inner, HostProbe)
        probe = self.inner
        return self._call(self._writes(obj), lambda: probe.dry_run_apply(obj))

    def server_version(self) -> str:
        # /version is a non-resource URL every authenticated client may read.
        assert isinstance(self.inner, HostProbe)
        return self.inner.server_version()

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> Manifest | None:
        return self._call({self._request(api_version, kind, "get", name, namespace)},
                          lambda: self.inner.get(api_version, kind, name, namespace))

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: Mapping[str, str] | None = None,
             field_selector: Mapping[str, str] | None = None) -> list[Manifest]:
        return self._call({self._request(api_version, kind, "list", "", namespace)},
                          lambda: self.inner.list(api_version, kind, namespace, label_selector,
                                                  field_selector))

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None) -> bool:
        return self._call({self._request(api_version, kind, "delete", name, namespace)},
                          lambda: self.inner.delete(api_version, kind, name, namespace))

    def request_token(self, namespace: str, service_account: str, *, expiration_seconds: int,
                      bound_secret: str | None) -> str:
        return self._call({(namespace, "", "serviceaccounts/token", "create", service_account)},
                          lambda: self.inner.request_token(
                              namespace, service_account, expiration_seconds=expiration_seconds,
                              bound_secret=bound_secret))


class WorkerConnector:
    """The app's connector, but the host is reached as the worker's ServiceAccount."""

    def __init__(self, settings: Settings, host: Recorder) -> None:
        self.inner = ClientConnector(settings)
        self.recorder = host

    def host(self) -> KubePort | None:
        return self.recorder

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return self.inner.virtual(kubeconfig_yaml)

    def ready(self, kubeconfig_yaml: str) -> bool:
        return self.inner.ready(kubeconfig_yaml)


# ----- the worker, its tenant and a GPU node


@dataclass
class Run:
    database: Database
    settings: Settings
    recorder: Recorder
    clock: Clock
    clusters: ClusterReconciler
    nodes: NodeReconciler
    webhook: WebhookReconciler
    usage: UsageSampler
    validator: TemplateValidator
    machines: MachineReconciler
    slug: str
    tenant_id: int
    principal: Principal
    operator: Principal
    gpu_class_id: int
    node: str
    node_clock: list[float]
    machine: str
    machine_clock: Later
    kubelet: Kubectl
    cluster_info_made: bool

    def pass_(self) -> None:
        """One pass of the cluster reconciler, later than any backoff, lease or resync."""
        self.clock.advance(301)
        run_due(self.clusters, "worker-1")
        run_due(self.usage, "worker-1")

    def label_nodes(self, admin: KubernetesAdapter, tenant: str | None) -> None:
        """Node reconciler passes until the node carries ``tenant`` (the controller-manager
        writes nodes too: an apply on a version it just replaced is retried on a later pass)."""
        for _ in range(5):
            self.node_clock[0] += 301
            run_due(self.nodes, "worker-1")
            if node_tenant(admin, self.node) == tenant:
                return
        raise AssertionError(f"node {self.node} was not labelled for {tenant}")

    def cluster(self, cluster_id: int) -> VirtualCluster | None:
        with self.database.session() as db:
            return db.scalar(select(VirtualCluster).where(VirtualCluster.id == cluster_id))


def gpu_node(name: str, provider_id: str | None = None) -> Manifest:
    """As GPU Feature Discovery labels it and the kubelet reports it."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {lbl.GPU_PRODUCT: H100,
                                                  "kubernetes.io/hostname": name}},
            "spec": {"providerID": provider_id} if provider_id else {},
            "status": {"capacity": {lbl.GPU_RESOURCE: "8", "cpu": "96", "memory": "2Ti"},
                       "allocatable": {lbl.GPU_RESOURCE: "8", "cpu": "96", "memory": "2Ti"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.fixture
def base() -> list[Manifest]:
    return render(BASE)


@pytest.fixture
def grant(host_admin: KubernetesAdapter, portal_namespace: str) -> Iterator[Grant]:
    found = Grant(host_admin, portal_namespace, f"rbac-worker-{secrets.token_hex(3)}")
    yield found
    found.remove()


@pytest.fixture
def kubelet(kai_host: ApiServer, tmp_path: Path) -> Iterator[Kubectl]:
    client = Kubectl(kai_host, tmp_path / "kubelet", manager="kubelet")
    yield client
    client.close()


def publish_cluster_info(admin: KubernetesAdapter, host: ApiServer) -> bool:
    """kube-public/cluster-info as kubeadm publishes it: the host's server and CA, no user.
    True when made here (the suite's API server has none of its own)."""
    if admin.get("v1", "ConfigMap", join.CLUSTER_INFO, join.CLUSTER_INFO_NAMESPACE) is not None:
        return False
    ca_data = base64.b64encode(host.ca.cert_pem).decode()
    kubeconfig = yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [
        {"name": "", "cluster": {"server": host.url, "certificate-authority-data": ca_data}}]})
    admin.apply({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": join.CLUSTER_INFO, "namespace": join.CLUSTER_INFO_NAMESPACE},
                 "data": {"kubeconfig": kubeconfig}})
    return True


def start(grant: Grant, base: list[Manifest], missing: Pair | None, kai_host: ApiServer,
          virtual_api: ApiServer, database: Database, kubelet: Kubectl, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Run:
    grant.apply(base, missing)
    kubeconfig = tmp_path / "worker.kubeconfig"
    kubeconfig.write_text(kai_host.kubeconfig_for(token=grant.token()))
    kubeconfig.chmod(0o600)
    settings = cluster_settings(kubeconfig=str(kubeconfig), worker_resync_seconds=0.0,
                                webhook_namespace=grant.namespace)
    use_standin_helm(tmp_path / "helm", monkeypatch, virtual_api.admin_kubeconfig)
    recorder = Recorder(fast_adapter(kubeconfig.read_text()), grant.admin)
    connector = WorkerConnector(settings, recorder)
    slug = f"rb-{secrets.token_hex(3)}"
    node = f"gpu-{slug}"
    kubelet.create(gpu_node(node))
    with database.transaction() as db:
        row = factories.tenant(db, slug, display_name=f"RBAC {slug}")
        admin = factories.user(db)
        factories.membership(db, row, admin, "admin")
        h100 = factories.gpu_class(db, H100, display_name="H100 80GB")
        factories.quota(db, row, h100, 16)
        principal = Principal(user=admin, via="token", roles={row.id: "admin"})
        operator = Principal(user=factories.user(db, admin=True), via="token")
        gpu_class_id, tenant_id = h100.id, row.id
    clock, node_clock = Clock(), [0.0]
    # The node, webhook and usage kinds run on the runtime's queue: a resync of 0 would have a
    # pass run their keys again and again; the tests' clocks move on by more than this.
    periodic = settings.model_copy(update={"worker_resync_seconds": 300.0})
    # As in the cluster, with its ServiceAccount and no kubeconfig: a machine joins at the
    # address and CA of kube-public/cluster-info.
    in_cluster = periodic.model_copy(update={"kubeconfig": None})
    machine_clock = Later()
    return Run(database, settings, recorder, clock,
               ClusterReconciler(settings, database, connector, clock=clock, wait_seconds=0.5),
               NodeReconciler(periodic, database, connector,
                              now=lambda: utcnow() + timedelta(seconds=node_clock[0])),
               WebhookReconciler(periodic, database, connector),
               UsageSampler(periodic, database, connector, now=clock),
               TemplateValidator(settings, database, connector, StandinCharts()),
               MachineReconciler(in_cluster, database, connector, now=machine_clock),
               slug, tenant_id, principal, operator, gpu_class_id, node, node_clock,
               f"m-{slug}", machine_clock, kubelet, publish_cluster_info(grant.admin, kai_host))


def remove_platform_objects(admin: KubernetesAdapter) -> None:
    """What every tenant on the host shares (root queue, guards) and the webhook's
    registration: made afresh by each run, so that the worker is seen creating them."""
    for obj in manifests.platform_objects(ManifestPolicy()):
        admin.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
    admin.delete(ADMISSION, "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION_NAME)
    for binding in metal3.bootstrap_role_bindings():
        admin.delete(RBAC, "ClusterRoleBinding", binding["metadata"]["name"])


def clean_up(admin: KubernetesAdapter, run: Run | None) -> None:
    remove_platform_objects(admin)
    if run is not None:
        admin.delete("v1", "Secret", TLS_SECRET_NAME, run.settings.webhook_namespace)
        admin.delete("v1", "Node", run.node)
        admin.delete("v1", "Namespace", stranger_namespace(run))
        remove_tenant_objects(admin, run.slug)
        remove_machine_objects(admin, run.machine)
        if run.cluster_info_made:
            admin.delete("v1", "ConfigMap", join.CLUSTER_INFO, join.CLUSTER_INFO_NAMESPACE)


def remove_machine_objects(admin: KubernetesAdapter, machine: str) -> None:
    """What a machine lifecycle cut short leaves on the host."""
    admin.delete(*BMH, machine, MACHINES_NS)
    admin.delete("v1", "Node", machine)
    for name in (metal3.bmc_secret_name(machine), metal3.user_data_secret_name(machine)):
        admin.delete("v1", "Secret", name, MACHINES_NS)
    for token in admin.list("v1", "Secret", metal3.BOOTSTRAP_TOKEN_NAMESPACE,
                            label_selector={lbl.MACHINE: machine}):
        admin.delete("v1", "Secret", token["metadata"]["name"], metal3.BOOTSTRAP_TOKEN_NAMESPACE)


# ----- the lifecycle, as the worker does it


def set_assignment(run: Run, assigned: bool) -> None:
    with run.database.transaction() as db:
        node = db.scalar(select(Node).where(Node.name == run.node))
        assert node is not None, "the node reconciler did not take the node into the inventory"
        if assigned:
            db.add(NodeAssignment(node_id=node.id, tenant_id=run.tenant_id))
            return
        for assignment in db.scalars(select(NodeAssignment).where(
                NodeAssignment.node_id == node.id, NodeAssignment.ended_at.is_(None))):
            assignment.ended_at = utcnow()


def node_tenant(admin: KubernetesAdapter, name: str) -> str | None:
    node = admin.get("v1", "Node", name)
    assert node is not None
    return (node["metadata"].get("labels") or {}).get(lbl.TENANT)


def converge(run: Run, cluster_id: int, passes: int = 4) -> VirtualCluster:
    seen: list[dict[str, Any]] = []
    for _ in range(passes):
        run.pass_()
        cluster = run.cluster(cluster_id)
        assert cluster is not None
        seen = list(cluster.conditions or [])
        if cond.is_true(seen, cond.READY) and cluster.observed_generation == cluster.generation:
            return cluster
    raise AssertionError(f"not Ready after {passes} passes: {seen}")


def lifecycle(run: Run, admin: KubernetesAdapter, delete_timeout: float = DELETE_TIMEOUT) -> None:
    # the node inventory, then the node given to the tenant
    run.label_nodes(admin, None)
    stranger = place_stranger(admin, run)
    set_assignment(run, assigned=True)
    run.label_nodes(admin, run.slug)
    # another tenant's pod, bound there before the dedication, is evicted (no kubelet here to
    # finish its termination)
    left = admin.get("v1", "Pod", stranger, stranger_namespace(run))
    assert left is None or left["metadata"].get("deletionTimestamp"), left
    # the admission webhook's key pair and registration
    host = run.recorder
    assert run.webhook.ensure(host) == 2
    assert admin.get(ADMISSION, "MutatingWebhookConfiguration",
                     WEBHOOK_CONFIGURATION_NAME) is not None
    assert run.webhook.ensure(host) == 0
    # a template validation, which dry-runs on the host as the worker (the web has no rights)
    validate_template(run)
    # the host's health as the worker checks it: reachable, KAI's CRD, the registration
    checks = {c.name: c for c in run_checks(host, run.settings, None)}
    assert all(checks[name].passed for name in (API_REACHABLE, KAI_QUEUE_CRD, ADMISSION_WEBHOOK))
    # a shared-pool cluster: created, resized, deleted
    payload = ClusterCreate(name="train", placement="shared-pool", gpu_class_id=run.gpu_class_id,
                            gpus=4, cpu_millicores=8000, memory_mib=65536)
    with run.database.transaction() as db:
        created = service.create_cluster(db, run.principal, run.settings, run.slug, payload)
    converge(run, created.id)
    for api_version, kind, name, namespace in own_objects(run.slug):
        assert admin.get(api_version, kind, name, namespace) is not None, f"{kind} {name}"
    run.pass_()  # the periodic resync of an unchanged cluster reads through the list cache
    assert cond.is_true(list(getattr(run.cluster(created.id), "conditions", None) or []),
                        cond.READY)
    with run.database.transaction() as db:
        service.resize_cluster(db, run.principal, run.slug, "train",
                               ClusterResize(gpus=8, cpu_millicores=8000, memory_mib=65536))
    converge(run, created.id)
    quota = admin.get("v1", "ResourceQuota", "tenant-quota", f"t-{run.slug}--train")
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    with run.database.transaction() as db:
        service.delete_cluster(db, run.principal, run.slug, "train")
    deadline = time.monotonic() + delete_timeout
    while run.cluster(created.id) is not None:
        assert time.monotonic() < deadline, "the cluster outlived the namespace timeout"
        run.pass_()
        time.sleep(0.5)
    for api_version, kind, name, namespace in own_objects(run.slug):
        assert admin.get(api_version, kind, name, namespace) is None, f"{kind} {name} remains"
    # the node given back
    set_assignment(run, assigned=False)
    run.label_nodes(admin, None)


def stranger_namespace(run: Run) -> str:
    return f"t-{run.slug}x--other"


def place_stranger(admin: KubernetesAdapter, run: Run) -> str:
    """A pod of another tenant's shared-pool cluster bound to the run's node; its name."""
    namespace = stranger_namespace(run)
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace,
                 "labels": {**lbl.cluster_labels(f"{run.slug}x", "other"),
                            lbl.PLACEMENT: "shared-pool"}}}, force=True)
    admin.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "default", "namespace": namespace}}, force=True)
    admin.apply({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "stranger", "namespace": namespace},
                 "spec": {"nodeName": run.node, "containers": [
                     {"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}, force=True)
    return "stranger"


def validate_template(run: Run) -> None:
    """The issue's training template, user namespaces and all (the host runs 1.32: the probe's
    dry-run asks it about the feature gate), validated by the worker's validator."""
    with run.database.transaction() as db:
        template = factories.cluster_template(db, f"tpl-{run.slug}")
        version_id = factories.template_version(
            db, template, 1, state="draft", validation_requested_at=utcnow(),
            **{**training(run.gpu_class_id)["settings"], "kubernetes_version": "1.32.4"}).id
    assert run_due(run.validator, "worker-1") == 1
    with run.database.session() as db:
        row = db.get(ClusterTemplateVersion, version_id)
        assert row is not None and row.validation is not None
        assert row.validation["passed"], row.validation
        db.delete(row)
        db.delete(db.get(ClusterTemplate, row.template_id))
        db.commit()


# ----- a bare-metal machine's lifecycle, as the worker does it


def metal3_reports(admin: KubernetesAdapter, machine: str, state: str) -> None:
    """The BareMetalHost's status as the baremetal-operator would write it (none runs here)."""
    admin.apply_status({
        "apiVersion": metal3.METAL3_API_VERSION, "kind": metal3.BAREMETAL_HOST,
        "metadata": {"name": machine, "namespace": MACHINES_NS},
        "status": {"errorCount": 0, "errorMessage": "", "hardwareProfile": "unknown",
                   "operationalStatus": "OK", "poweredOn": True,
                   "provisioning": {"ID": "", "state": state}}}, manager="baremetal-operator")


def machine_row(run: Run) -> Machine | None:
    with run.database.session() as db:
        return db.scalar(select(Machine).where(Machine.name == run.machine))


def machine_pass(run: Run) -> str:
    """One pass of the machines reconciler, later than any poll or resync: the phase after it
    ("gone" once the machine is removed)."""
    run.machine_clock.later(301)
    run_due(run.machines, "worker-1")
    row = machine_row(run)
    return row.phase if row is not None else "gone"


def ask(run: Run, action: Callable[[Any, Principal, str], object]) -> None:
    """Provision, release or remove, as a platform admin asks it."""
    with run.database.transaction() as db:
        action(db, run.operator, run.machine)


def secret_text(secret: Manifest | None, key: str) -> str:
    assert secret is not None
    return base64.b64decode(secret["data"][key]).decode()


def machine_lifecycle(run: Run, admin: KubernetesAdapter, host: ApiServer) -> None:
    name = run.machine
    with run.database.transaction() as db:
        gpu = db.get(GpuClass, run.gpu_class_id)
        assert gpu is not None
        row = factories.machine(db, factories.env_host(db), gpu, name)
        enqueue(db, MACHINES, row.id)
    # registered: the BareMetalHost and its BMC Secret; Metal3 inspects it into the pool
    assert machine_pass(run) == "registering"
    assert admin.get(*BMH, name, MACHINES_NS) is not None
    metal3_reports(admin, name, "available")
    assert machine_pass(run) == "available"
    # provisioned: a bootstrap token, the user data joining the address cluster-info gives
    ask(run, machines_service.provision)
    assert machine_pass(run) == "available"
    token_id = getattr(machine_row(run), "bootstrap_token_id", None)
    assert token_id
    token = admin.get("v1", "Secret", metal3.bootstrap_token_secret_name(token_id),
                      metal3.BOOTSTRAP_TOKEN_NAMESPACE)
    assert token is not None and token["type"] == metal3.BOOTSTRAP_TOKEN_TYPE
    assert host.url in secret_text(admin.get(
        "v1", "Secret", metal3.user_data_secret_name(name), MACHINES_NS), metal3.USER_DATA_KEY)
    for binding in metal3.bootstrap_role_bindings():
        assert admin.get(RBAC, "ClusterRoleBinding", binding["metadata"]["name"]) is not None
    assert machine_pass(run) == "available"  # Metal3 has not started: the token is read back
    assert getattr(machine_row(run), "bootstrap_token_id", None) == token_id
    metal3_reports(admin, name, "provisioning")
    assert machine_pass(run) == "provisioning"
    metal3_reports(admin, name, "provisioned")
    run.kubelet.create(gpu_node(name, metal3.provider_id(name)))
    assert machine_pass(run) == "joined"
    # released: the image taken off; once Metal3 deprovisions, the Node and the join go
    ask(run, machines_service.release)
    assert machine_pass(run) == "deprovisioning"
    stored = admin.get(*BMH, name, MACHINES_NS)
    assert stored is not None and "image" not in stored["spec"]
    metal3_reports(admin, name, "deprovisioning")
    assert machine_pass(run) == "deprovisioning"
    assert admin.get("v1", "Node", name) is None
    assert admin.get("v1", "Secret", metal3.bootstrap_token_secret_name(token_id),
                     metal3.BOOTSTRAP_TOKEN_NAMESPACE) is None
    assert admin.get("v1", "Secret", metal3.user_data_secret_name(name), MACHINES_NS) is None
    metal3_reports(admin, name, "available")
    assert machine_pass(run) == "available"
    # removed: the BareMetalHost (no operator holds it back), then its BMC Secret
    ask(run, machines_service.delete_machine)
    assert machine_pass(run) == "gone"
    assert admin.get(*BMH, name, MACHINES_NS) is None
    assert admin.get("v1", "Secret", metal3.bmc_secret_name(name), MACHINES_NS) is None


# ----- the tests


@pytest.fixture
def worker_run(
    grant: Grant, base: list[Manifest], kai_host: ApiServer, metal3_host: ApiServer,
    virtual_api: ApiServer, database: Database, kubelet: Kubectl, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> Iterator[Run]:
    missing: Pair | None = getattr(request, "param", None)
    run: Run | None = None
    remove_platform_objects(grant.admin)
    try:
        run = start(grant, base, missing, kai_host, virtual_api, database, kubelet, tmp_path,
                    monkeypatch)
        yield run
    finally:
        clean_up(grant.admin, run)


def outside_the_worker_roles(run: Run, base: list[Manifest]) -> list[Request]:
    """Requests no role of the worker's own allows, in that namespace and for that name (the
    helm role would let many through: a Secret in any namespace). Template validation's
    user-namespace probe is a StatefulSet, which only the helm role allows."""
    roles = worker_roles(base)
    return sorted(request for request in run.recorder.requests
                  if not covered(roles, request) and request[1:3] != ("apps", "statefulsets"))


def test_the_worker_runs_the_whole_lifecycle_with_only_its_roles(
    worker_run: Run, host_admin: KubernetesAdapter, kai_host: ApiServer, base: list[Manifest]
) -> None:
    lifecycle(worker_run, host_admin)
    machine_lifecycle(worker_run, host_admin, kai_host)
    assert worker_run.recorder.forbidden == set()
    assert outside_the_worker_roles(worker_run, base) == []
    probe = {("apps", "statefulsets", verb) for verb in ("create", "patch")}
    assert worker_run.recorder.used <= worker_pairs(base) | probe
    assert probe <= pairs(find(base, "ClusterRole", WORKER_HELM))


@pytest.mark.parametrize("worker_run", [("", "nodes", "patch"),
                                        ("scheduling.run.ai", "queues", "delete")],
                         indirect=True, ids=["nodes-patch", "queues-delete"])
def test_a_missing_verb_fails_the_lifecycle(
    worker_run: Run, host_admin: KubernetesAdapter, request: pytest.FixtureRequest
) -> None:
    missing = request.node.callspec.params["worker_run"]
    with pytest.raises(AssertionError):
        # a refused delete never finishes: no need to wait long for that
        lifecycle(worker_run, host_admin, delete_timeout=15.0)
    assert missing in worker_run.recorder.forbidden


@pytest.mark.parametrize("worker_run", [(RBAC_GROUP, "clusterroles", "bind"),
                                        ("metal3.io", "baremetalhosts", "create")],
                         indirect=True, ids=["clusterroles-bind", "baremetalhosts-create"])
def test_a_missing_verb_fails_the_machine_lifecycle(
    worker_run: Run, host_admin: KubernetesAdapter, kai_host: ApiServer,
    request: pytest.FixtureRequest,
) -> None:
    """Without `bind` on the bootstrap roles the worker would need what they grant; it holds
    neither, so the join's ClusterRoleBindings are refused."""
    missing = request.node.callspec.params["worker_run"]
    with pytest.raises(AssertionError):
        machine_lifecycle(worker_run, host_admin, kai_host)
    assert missing in worker_run.recorder.forbidden


def test_the_roles_grant_nothing_the_worker_does_not_ask_for(
    worker_run: Run, host_admin: KubernetesAdapter, kai_host: ApiServer, base: list[Manifest]
) -> None:
    lifecycle(worker_run, host_admin)
    machine_lifecycle(worker_run, host_admin, kai_host)
    unused = [entry for role in worker_roles(base)
              for entry in unasked(role, worker_run.recorder.requests)]
    assert unused == [], f"granted, never asked for: {unused}"
    assert pairs(find(base, "ClusterRole", WORKER_HELM)) == HELM_ALLOWLIST


def in_force(worker: KubePort, probe: Manifest, timeout: float = 10.0) -> None:
    """Once the worker's write of ``probe`` is refused: the API server loads a new policy
    within a second or so."""
    deadline = time.monotonic() + timeout
    status = None
    while status is None:
        try:
            worker.apply(probe, force=True)
        except KubeError as error:
            status = error.status
            continue
        assert time.monotonic() < deadline, "the policy never refused the worker's write"
        time.sleep(0.3)
    assert status == 403


def test_in_kube_system_the_worker_writes_only_its_own_bootstrap_tokens(
    worker_run: Run, host_admin: KubernetesAdapter, kai_host: ApiServer
) -> None:
    """RBAC cannot tell a bootstrap token from another Secret (and the helm role allows every
    Secret): the base's admission policy does."""
    worker = worker_run.recorder.inner
    namespace = metal3.BOOTSTRAP_TOKEN_NAMESPACE
    other: Manifest = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                       "metadata": {"name": f"other-{worker_run.slug}", "namespace": namespace,
                                    "labels": lbl.managed()},
                       "data": {"key": base64.b64encode(b"someone else's").decode()}}
    probe = {**other, "metadata": {**other["metadata"], "name": f"probe-{worker_run.slug}"}}
    host_admin.apply(other, manager="someone-else")
    try:
        in_force(worker, probe)
        with pytest.raises(KubeError) as changed:
            worker.apply({**other, "data": {"key": ""}}, force=True)
        assert changed.value.status == 403 and "bootstrap token" in changed.value.message
        with pytest.raises(KubeError) as deleted:
            worker.delete("v1", "Secret", other["metadata"]["name"], namespace)
        assert deleted.value.status == 403
        kept = host_admin.get("v1", "Secret", other["metadata"]["name"], namespace)
        assert kept is not None and kept["data"] == other["data"]
        # its own tokens are minted, read and revoked all the same
        machine_lifecycle(worker_run, host_admin, kai_host)
        assert worker_run.recorder.forbidden == set()
    finally:
        for secret in (other, probe):
            host_admin.delete("v1", "Secret", secret["metadata"]["name"], namespace)


# ----- the admission webhook's roles


def test_the_webhook_reads_what_it_needs_and_is_granted_nothing_more(
    grant: Grant, base: list[Manifest], kai_host: ApiServer, database: Database,
    host_admin: KubernetesAdapter, tmp_path: Path,
) -> None:
    settings = cluster_settings(webhook_namespace=grant.namespace)
    worker = WebhookReconciler(settings, database, WorkerConnector(settings, Recorder(
        host_admin, host_admin)))
    webhook = f"rbac-webhook-{secrets.token_hex(3)}"
    roles = [("ClusterRole", "gpu-tenant-portal-webhook"), ("Role", "gpu-tenant-portal-webhook")]
    try:
        worker.ensure(host_admin)
        grant.account = webhook
        grant.objects.append({"apiVersion": "v1", "kind": "ServiceAccount",
                              "metadata": {"name": webhook, "namespace": grant.namespace}})
        for kind, name in roles:
            role = find(base, kind, name)
            grant.objects.append({**role, "metadata": {**role["metadata"], "name": webhook}})
            binding = find(base, f"{kind}Binding", name)
            grant.objects.append({
                **binding, "metadata": {**binding["metadata"], "name": webhook},
                "roleRef": {**binding["roleRef"], "name": webhook},
                "subjects": [{"kind": "ServiceAccount", "name": webhook,
                              "namespace": grant.namespace}]})
        for obj in grant.objects:
            host_admin.apply(obj, force=True)
        recorder = Recorder(fast_adapter(kai_host.kubeconfig_for(token=grant.token())),
                            host_admin)
        certificate = ServingCertificate(recorder, grant.namespace, cert_dir=tmp_path)
        assert certificate.reload()
        # a new key pair (the old Secret lost): served once the registration trusts it
        host_admin.delete("v1", "Secret", TLS_SECRET_NAME, grant.namespace)
        worker.ensure(host_admin)
        assert certificate.reload()
        assert NamespaceLabels(recorder).get(grant.namespace) is not None
        assert recorder.forbidden == set()
        granted = set().union(*(pairs(find(base, kind, name)) for kind, name in roles))
        assert recorder.used == granted
    finally:
        host_admin.delete(ADMISSION, "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION_NAME)
        host_admin.delete("v1", "Secret", TLS_SECRET_NAME, grant.namespace)
