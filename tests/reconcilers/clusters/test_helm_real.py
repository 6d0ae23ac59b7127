"""The real helm installs the real vCluster chart on a real host, as the worker.

helm v3 and the chart come from ``make tools`` (the Go module proxy: helm's own module, and the
chart inside the vCluster module the vcluster binary is built from), served as a Helm repository
on loopback. The host is etcd + kube-apiserver 1.32 + controller-manager (so the release's
StatefulSet gets its pod); the worker reaches it only with the ServiceAccount token of the
Kustomize base's RBAC, never as admin. Nothing runs the pod yet: it is created and stays Pending.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import service
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate
from app.database.core import Database
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.helm import HelmInstaller
from app.kube.manifests import dump_yaml
from app.kube.port import Manifest, kind_info, register_kind
from app.reconcilers.clusters import ClusterReconciler
from tests import factories
from tests.clusters.cleanup import remove_tenant_objects
from tests.clusters.support import Clock, cluster_settings
from tests.deploy.kustomize import BASE, render
from tests.deploy.rbac import Grant
from tests.support.charts import charts_dir, served
from tests.support.drive import run_due
from tests.support.installers import FakeInstaller
from tests.support.kube_server import ApiServer, tool
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kube_server

H100 = "NVIDIA-H100-80GB-HBM3"
CHART_VERSION = Settings(env="test").vcluster_chart_version
DELETE_TIMEOUT = 90.0
register_kind("v1", "Event", "events", namespaced=True)
# (apiVersion, kind, name, namespace) of one object of the release.
Ref = tuple[str, str, str, str | None]


@pytest.fixture(scope="module")
def chart_repo() -> Iterator[str]:
    with served(charts_dir("vcluster", CHART_VERSION)) as url:
        yield url


@pytest.fixture
def worker_kubeconfig(host_admin: KubernetesAdapter, kai_host: ApiServer, portal_namespace: str,
                      tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for a ServiceAccount holding exactly the base's worker RBAC."""
    grant = Grant(host_admin, portal_namespace, f"helm-worker-{secrets.token_hex(3)}")
    grant.apply(render(BASE), None)
    path = tmp_path / "worker.kubeconfig"
    path.write_text(kai_host.kubeconfig_for(token=grant.token()))
    path.chmod(0o600)
    yield path
    grant.remove()


@dataclass
class Worker:
    settings: Settings
    database: Database
    clock: Clock
    reconciler: ClusterReconciler
    principal: Principal
    slug: str
    gpu_class_id: int

    @property
    def namespace(self) -> str:
        return f"t-{self.slug}--train"

    def create(self) -> int:
        """A shared-pool cluster "train": its namespace carries the guard policies' labels."""
        payload = ClusterCreate(name="train", placement="shared-pool",
                                gpu_class_id=self.gpu_class_id, gpus=4, cpu_millicores=8000,
                                memory_mib=65536)
        with self.database.transaction() as db:
            return service.create_cluster(db, self.principal, self.settings, self.slug,
                                          payload).id

    def delete(self) -> None:
        with self.database.transaction() as db:
            service.delete_cluster(db, self.principal, self.slug, "train")

    def pass_(self) -> None:
        """One pass of the cluster reconciler, later than any backoff or resync."""
        self.clock.advance(301)
        run_due(self.reconciler, "worker-1")

    def cluster(self, cluster_id: int) -> VirtualCluster | None:
        with self.database.session() as db:
            return db.scalar(select(VirtualCluster).where(VirtualCluster.id == cluster_id))

    def condition(self, cluster_id: int, type_: str) -> dict[str, Any]:
        cluster = self.cluster(cluster_id)
        assert cluster is not None
        found: list[dict[str, Any]] = [c for c in cluster.conditions or []
                                       if c["type"] == type_]
        assert found, f"no {type_} condition: {cluster.conditions}"
        return found[0]

    def until(self, cluster_id: int, done: Callable[[], bool], what: str,
              passes: int = 6) -> None:
        for _ in range(passes):
            self.pass_()
            if done():
                return
        cluster = self.cluster(cluster_id)
        raise AssertionError(f"{what} after {passes} passes: "
                             f"{cluster.conditions if cluster else 'row gone'}")


@pytest.fixture
def worker(worker_kubeconfig: Path, chart_repo: str, database: Database,
           host_admin: KubernetesAdapter) -> Iterator[Worker]:
    settings = cluster_settings(kubeconfig=str(worker_kubeconfig),
                                helm_binary=str(tool("helm")), vcluster_chart_repo=chart_repo,
                                worker_resync_seconds=0.0)
    slug = f"helm-{secrets.token_hex(3)}"
    with database.transaction() as db:
        _, principal, h100 = factories.gpu_tenant(db, slug, gpus=16, product=H100)
        gpu_class_id = h100.id
    clock = Clock()
    reconciler = ClusterReconciler(settings, database, ClientConnector(settings), clock=clock,
                                   wait_seconds=0.5)
    yield Worker(settings, database, clock, reconciler, principal, slug, gpu_class_id)
    remove_tenant_objects(host_admin, slug)


def release_objects(admin_kubeconfig: Path, release: str, namespace: str) -> list[Ref]:
    """What helm recorded as the release's objects (``helm get manifest``, as admin)."""
    done = subprocess.run(
        [str(tool("helm")), "get", "manifest", release, "--namespace", namespace,
         "--kubeconfig", str(admin_kubeconfig)], capture_output=True, text=True, check=True,
        timeout=60)
    return [(o["apiVersion"], o["kind"], o["metadata"]["name"],
             o["metadata"].get("namespace", namespace)
             if kind_info(o["apiVersion"], o["kind"]).namespaced else None)
            for o in yaml.safe_load_all(done.stdout) if o]


def contents(admin: KubernetesAdapter, refs: list[Ref]) -> dict[Ref, Manifest]:
    """Each object as its writers left it: without what the controllers keep writing to its
    status (a quota's use, a StatefulSet's replicas) and the version that follows from it."""
    found: dict[Ref, Manifest] = {}
    for ref in refs:
        obj = admin.get(*ref)
        assert obj is not None, f"{ref[1]} {ref[2]} of the release is missing"
        metadata = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        metadata["managedFields"] = [m for m in metadata.get("managedFields", [])
                                     if m.get("subresource") != "status"]
        found[ref] = {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}
    return found


def control_plane_pod(admin: KubernetesAdapter, namespace: str) -> Manifest | None:
    return admin.get("v1", "Pod", "train-0", namespace)


def events(admin: KubernetesAdapter, namespace: str) -> list[str]:
    """What the controllers said in the namespace, for a failure's message."""
    return [f"{e['involvedObject']['kind']} {e['involvedObject']['name']}: {e['reason']}: "
            f"{e['message']}" for e in admin.list("v1", "Event", namespace)]


def test_the_worker_installs_and_uninstalls_the_real_chart_under_its_own_rbac(
        worker: Worker, host_admin: KubernetesAdapter, kai_host: ApiServer,
        tmp_path: Path) -> None:
    admin_kubeconfig = kai_host.write_admin_kubeconfig(tmp_path / "admin.kubeconfig")
    cluster_id = worker.create()
    worker.until(cluster_id, lambda: worker.condition(cluster_id, cond.RELEASE_INSTALLED)[
        "status"] == "True", "the release was not installed")

    # Every object of the release was accepted: the namespace's Pod Security level, quota and
    # NetworkPolicies, and the guard policies, as the worker's RBAC allows.
    objects = release_objects(admin_kubeconfig, "train", worker.namespace)
    kinds = {kind for _, kind, _, _ in objects}
    assert {"StatefulSet", "Service", "ServiceAccount", "Role", "RoleBinding",
            "ClusterRole", "ClusterRoleBinding"} <= kinds
    before = contents(host_admin, objects)

    # The control plane's pod is created under Pod Security "restricted" and waits: nothing
    # schedules or runs it on this host (the lab does).
    pod = wait_for(lambda: control_plane_pod(host_admin, worker.namespace),
                   lambda: f"the StatefulSet's pod; the namespace's events: "
                           f"{events(host_admin, worker.namespace)}", timeout=60.0)
    assert pod is not None
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")

    # The same values again change nothing, neither the worker's next pass nor a direct install.
    worker.pass_()
    values = helm_values(admin_kubeconfig, "train", worker.namespace)
    HelmInstaller.from_settings(worker.settings).install("train", worker.namespace, values)
    assert contents(host_admin, objects) == before

    # Deleting the cluster uninstalls the release: nothing of it is left.
    worker.delete()
    deadline = time.monotonic() + DELETE_TIMEOUT
    while worker.cluster(cluster_id) is not None:
        assert time.monotonic() < deadline, "the cluster outlived the namespace timeout"
        worker.pass_()
        time.sleep(0.5)
    left = [ref for ref in objects if host_admin.get(*ref) is not None]
    assert left == []


def helm_values(admin_kubeconfig: Path, release: str, namespace: str) -> str:
    done = subprocess.run(
        [str(tool("helm")), "get", "values", release, "--namespace", namespace,
         "--kubeconfig", str(admin_kubeconfig), "--output", "yaml"],
        capture_output=True, text=True, check=True, timeout=60)
    return done.stdout


def test_values_the_chart_refuses_put_its_message_in_the_condition_without_a_hot_loop(
        worker: Worker, host_admin: KubernetesAdapter) -> None:
    refusing = refused_values(HelmInstaller.from_settings(worker.settings))
    worker.reconciler.installer = refusing
    worker.reconciler.settings = worker.settings.model_copy(
        update={"worker_resync_seconds": 600.0})
    cluster_id = worker.create()
    worker.clock.advance(1)
    run_due(worker.reconciler, "worker-1")
    failed = worker.condition(cluster_id, cond.FAILED)
    installed = worker.condition(cluster_id, cond.RELEASE_INSTALLED)
    assert failed["status"] == "True" and failed["reason"] == "ValuesRejected"
    assert installed["status"] == "False" and installed["reason"] == "ValuesRejected"
    # helm's own words, naming the key the chart's schema does not allow
    assert "don't meet the specifications of the schema" in installed["message"]
    assert "notAKey" in installed["message"]
    assert host_admin.get("apps/v1", "StatefulSet", "train", worker.namespace) is None
    # Failed for good: helm is not run again until the resync, then once.
    assert refusing.installs == 1
    for _ in range(5):
        worker.clock.advance(60)
        run_due(worker.reconciler, "worker-1")
    assert refusing.installs == 1
    worker.clock.advance(600)
    run_due(worker.reconciler, "worker-1")
    assert refusing.installs == 2


def refused_values(helm: HelmInstaller) -> FakeInstaller:
    """The real helm, given the portal's values plus a key the chart's schema does not have
    (as a chart upgrade that drops a key would refuse them)."""
    installer = FakeInstaller(takes_down=helm.uninstall)

    def install(release: str, namespace: str) -> None:
        values = yaml.safe_load(installer.values[release])
        values["controlPlane"]["notAKey"] = True
        helm.install(release, namespace, dump_yaml(values))

    installer.brings_up = install
    return installer
