"""Two real host clusters, one portal (issue 17's done-when).

Host ``eu`` is the run's shared host API server (the environment's host, PORTAL_KUBECONFIG's);
host ``us`` is a second real control plane (its own etcd and ports) that an admin registers
with its kubeconfig, in another region. A tenant with quota in both regions creates a cluster
in each: placement puts each on its region's host, the worker (in-process, threaded, one pass
per host) reaches each host with that host's own client and runs the stand-in helm against it,
and both converge. Stopping ``us``'s API server leaves ``eu``'s cluster converging while the
``us`` cluster keeps its last known state, is marked unreachable and is never deleted; when the
API server is back, it converges too. Each cluster's objects are on its own host only.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import service
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate, ClusterResize
from app.database.core import Database
from app.hosts import service as hosts
from app.hosts.models import HostCluster
from app.hosts.schemas import HostCredentialsIn, HostRegister
from app.kit.config import Settings
from app.kit.errors import Conflict, ValidationFailed
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import labels as lbl
from app.reconcilers.clusters import ClusterReconciler
from tests import factories
from tests.clusters.cleanup import remove_tenant_objects
from tests.clusters.standin_helm import helm_calls, use_standin_helm
from tests.clusters.support import H100, Clock, cluster_settings
from tests.support.drive import run_due
from tests.support.kube_server import ApiServer

QUEUE = lbl.KAI_API_VERSION
A100 = "NVIDIA-A100-SXM4-80GB"


@dataclass
class Fleet:
    database: Database
    settings: Settings
    admin: Principal
    tenant: Principal
    slug: str
    h100: int
    a100: int
    eu: KubernetesAdapter
    us: KubernetesAdapter
    us_api: ApiServer
    clock: Clock
    reconciler: ClusterReconciler

    def create(self, name: str, region: str | None, gpus: int = 2,
               gpu_class: int | None = None) -> int:
        payload = ClusterCreate(name=name, region=region, gpu_class_id=gpu_class or self.h100,
                                gpus=gpus, cpu_millicores=2000, memory_mib=4096)
        with self.database.transaction() as db:
            return service.create_cluster(db, self.tenant, self.settings, self.slug,
                                          payload).id

    def run(self) -> int:
        self.clock.advance(301)  # later than any backoff, lease or resync
        return run_due(self.reconciler, "worker-1")

    def cluster(self, cluster_id: int) -> VirtualCluster:
        with self.database.session() as db:
            found = db.get(VirtualCluster, cluster_id)
            assert found is not None, f"cluster {cluster_id} was deleted"
            return found

    def converged(self, cluster_id: int) -> bool:
        cluster = self.cluster(cluster_id)
        return (cond.is_true(cluster.conditions, cond.READY)
                and cluster.observed_generation == cluster.generation)


@pytest.fixture
def fleet(own_pg_database: Database, kai_host: ApiServer, host_admin: KubernetesAdapter,
          us_api: ApiServer, virtual_api: ApiServer, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    use_standin_helm(tmp_path / "helm", monkeypatch, virtual_api.admin_kubeconfig)
    kubeconfig = kai_host.write_admin_kubeconfig(tmp_path / "eu.kubeconfig")
    settings = cluster_settings(kubeconfig=str(kubeconfig), worker_concurrency=2)
    slug = f"fl-{secrets.token_hex(3)}"
    with own_pg_database.transaction() as db:
        eu = factories.env_host(db)
        eu.name, eu.region = "gpu-eu-1", "eu"
        admin = factories.user(db, admin=True)
        tenant = factories.tenant(db, slug)
        tenant_admin = factories.user(db)
        factories.membership(db, tenant, tenant_admin, "admin")
        h100 = factories.gpu_class(db, H100, display_name="H100 80GB")
        a100 = factories.gpu_class(db, A100, display_name="A100 80GB")
        factories.quota(db, tenant, h100, 8, region="eu")
        factories.quota(db, tenant, h100, 4, region="us")
        factories.quota(db, tenant, a100, 8, region="us")
        factories.node(db, eu, h100, gpu_count=8)
        admin_principal = Principal(user=admin, via="token")
        tenant_principal = Principal(user=tenant_admin, via="token",
                                     roles={tenant.id: "admin"})
        ids = h100.id, a100.id
    with own_pg_database.transaction() as db:  # an admin registers the second host
        hosts.register_host(db, admin_principal, settings, HostRegister(
            name="gpu-us-1", region="us", description="second site",
            webhook_url="https://webhook.gpu-us-1.example:9443",
            credentials=HostCredentialsIn(kind="kubeconfig", kubeconfig=us_api.admin_kubeconfig)))
        us_row = db.scalar(select(HostCluster).where(HostCluster.name == "gpu-us-1"))
        assert us_row is not None and us_row.credentials_encrypted
        factories.node(db, us_row, h100, gpu_count=8)
        factories.node(db, us_row, a100, gpu_count=8)
    clock = Clock()
    reconciler = ClusterReconciler(settings, own_pg_database, ClientConnector(settings),
                                   clock=clock, wait_seconds=0.5)
    us_admin = us_api.adapter()
    yield Fleet(own_pg_database, settings, admin_principal, tenant_principal, slug, *ids,
                host_admin, us_admin, us_api, clock, reconciler)
    if not us_api.is_running():
        us_api.restart_apiserver()
    for host in (host_admin, us_admin):
        remove_tenant_objects(host, slug)
    us_admin.close()


def namespace(fleet: Fleet, name: str) -> str:
    return f"t-{fleet.slug}--{name}"


@pytest.mark.kube_server
def test_a_cluster_in_each_region_converges_on_its_own_host_and_survives_the_other_going_down(
    fleet: Fleet, tmp_path: Path,
) -> None:
    eu_id = fleet.create("train", "eu", gpus=4)
    us_id = fleet.create("serve", "us", gpus=2)
    assert fleet.cluster(eu_id).host_cluster_id != fleet.cluster(us_id).host_cluster_id
    with fleet.database.session() as db:
        placed = {e.target_id: e.after or {} for e in db.scalars(select(AuditEvent).where(
            AuditEvent.action == "virtual_cluster.create"))}
    assert placed[str(eu_id)]["host_cluster"] == "gpu-eu-1"
    assert placed[str(us_id)]["host_cluster"] == "gpu-us-1"
    assert placed[str(us_id)]["placement_reason"].startswith("gpu-us-1: region us as requested")

    for _ in range(3):
        fleet.run()
        if fleet.converged(eu_id) and fleet.converged(us_id):
            break
    assert fleet.converged(eu_id) and fleet.converged(us_id)

    # Cross-host isolation: each cluster's objects on its own host only; the tenant's queue on
    # each host holds the tenant's quota of that host's region.
    train, serve = namespace(fleet, "train"), namespace(fleet, "serve")
    assert fleet.eu.get("v1", "Namespace", train) is not None
    assert fleet.us.get("v1", "Namespace", train) is None
    assert fleet.us.get("v1", "Namespace", serve) is not None
    assert fleet.eu.get("v1", "Namespace", serve) is None
    assert fleet.eu.get("v1", "Secret", "vc-train", train) is not None  # helm ran against eu
    assert fleet.us.get("v1", "Secret", "vc-serve", serve) is not None  # and against us
    eu_queue = fleet.eu.get(QUEUE, "Queue", fleet.slug)
    us_queue = fleet.us.get(QUEUE, "Queue", fleet.slug)
    assert eu_queue is not None and us_queue is not None
    assert eu_queue["spec"]["resources"]["gpu"]["quota"] == 8
    assert us_queue["spec"]["resources"]["gpu"]["quota"] == 12  # H100 4 + A100 8 in us
    assert fleet.us.get(QUEUE, "Queue", f"{fleet.slug}--train") is None
    installs = [c["argv"] for c in helm_calls(tmp_path / "helm" / "helm-calls.jsonl")]
    kubeconfigs = {str(argv[2]): Path(str(argv[argv.index("--kubeconfig") + 1]))
                   for argv in installs if isinstance(argv, list) and argv[0] == "upgrade"}
    assert kubeconfigs["train"] == Path(fleet.settings.kubeconfig or "")
    assert kubeconfigs["serve"] != kubeconfigs["train"]  # us's, written for the one run
    assert not kubeconfigs["serve"].exists()

    # Both change; us stops answering while the change is under way.
    for cluster_name in ("train", "serve"):
        with fleet.database.transaction() as db:
            service.resize_cluster(db, fleet.tenant, fleet.slug, cluster_name,
                                   ClusterResize(gpus=1))
    fleet.us_api.stop_apiserver()
    fleet.run()
    assert fleet.converged(eu_id)  # eu went on as if nothing happened
    quota = fleet.eu.get("v1", "ResourceQuota", "tenant-quota", train)
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "1"
    down = fleet.cluster(us_id)
    reachable = cond.find(down.conditions, cond.HOST_REACHABLE)
    assert reachable is not None and reachable["status"] == "False"
    assert reachable["reason"] == cond.HOST_UNREACHABLE and "gpu-us-1" in reachable["message"]
    assert cond.is_true(down.conditions, cond.READY)  # its last known state, kept
    assert down.observed_generation < down.generation
    assert cond.phase_of(cond.statuses(down.conditions), False) == "Unreachable"
    for _ in range(2):  # more passes while it is down: eu stays Ready, us is never deleted
        fleet.run()
        assert fleet.converged(eu_id)
        assert fleet.cluster(us_id).deletion_requested_at is None

    fleet.us_api.restart_apiserver()
    for _ in range(3):
        fleet.run()
        if fleet.converged(us_id):
            break
    back = fleet.cluster(us_id)
    assert fleet.converged(us_id), back.conditions
    assert cond.is_true(back.conditions, cond.HOST_REACHABLE)
    quota = fleet.us.get("v1", "ResourceQuota", "tenant-quota", serve)
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "1"


@pytest.mark.kube_server
def test_placement_by_class_and_region_on_two_hosts(fleet: Fleet) -> None:
    # A100s are only on the us host: the portal chooses it when no region is named
    a100 = fleet.create("infer", None, gpus=2, gpu_class=fleet.a100)
    with fleet.database.session() as db:
        out = service.cluster_out(db, fleet.cluster(a100))
    assert (out.host_cluster, out.region) == ("gpu-us-1", "us")
    assert "region us chosen by the portal" in out.placement_reason
    # H100 quota has room in eu (8) beyond us (4): 6 GPUs can only go to eu
    assert fleet.cluster(fleet.create("big", None, gpus=6)).host_cluster_id != (
        fleet.cluster(a100).host_cluster_id)
    # A100 asked in eu: eu carries no A100 and the tenant has no A100 quota there
    with pytest.raises(ValidationFailed) as refused:
        fleet.create("nowhere", "eu", gpus=1, gpu_class=fleet.a100)
    assert refused.value.errors[0]["field"] == "gpus"
    assert ("you have 0 A100 80GB GPUs approved in region eu; 0 are left for shared-pool "
            "clusters, 1 asked") in refused.value.detail
    # eu cordoned: an eu cluster is refused with each host's reason
    with fleet.database.transaction() as db:
        hosts.set_state(db, fleet.admin, "gpu-eu-1", "cordoned")
    with pytest.raises(Conflict) as conflict:
        fleet.create("later", "eu", gpus=1)
    assert "gpu-eu-1 (eu): host is cordoned" in conflict.value.detail
    assert "gpu-us-1 (us): in region us, not eu" in conflict.value.detail
    fleet.run()
    assert fleet.converged(a100)
