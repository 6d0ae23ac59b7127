"""Test doubles and a harness for the cluster reconciler on the in-memory Kubernetes fake."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select

from app.auth.principal import Principal
from app.clusters import service
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate, ClusterOut
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube import simulated
from app.kube.helm import AddonChart, InstallError
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.leases import HeldLeases
from app.workqueue import CLUSTERS
from app.workqueue.models import WorkItem
from tests import factories
from tests.support import virtual_clusters
from tests.support.cluster_kinds import run_cluster_kinds, runtime_of
from tests.support.tenancy import Tenancy

H100 = "NVIDIA-H100-80GB-HBM3"
VC_SERVER = "https://train.acme.vc.example.com"


class Clock:
    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class FakeConnector:
    """The host is an in-memory fake (or none); a virtual cluster is ready when told so."""

    def __init__(self, host: KubePort | None, ready: bool = True) -> None:
        self._host = host
        self.answers_readyz = ready
        self.readyz_calls = 0

    def host(self) -> KubePort | None:
        return self._host

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return InMemoryKube()

    def ready(self, kubeconfig_yaml: str) -> bool:
        self.readyz_calls += 1
        return self.answers_readyz and "admin-token-never-shown" in kubeconfig_yaml


@dataclass
class FakeInstaller:
    """Plays helm: install brings the control plane up (StatefulSet, Secret vc-<release>)."""

    kube: InMemoryKube
    brings_up_secret: bool = True
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)
    # Add-ons: every call, what is installed now, and errors the next calls raise in turn.
    addon_calls: list[tuple[str, str]] = field(default_factory=list)
    addons: dict[str, AddonChart] = field(default_factory=dict)
    addon_failures: list[InstallError] = field(default_factory=list)

    def install(self, release: str, namespace: str, values_yaml: str) -> None:
        self.calls.append(("install", release, namespace))
        self.values[release] = values_yaml
        self.kube.seed(simulated.control_plane_statefulset(release, namespace))
        if self.brings_up_secret:
            self.kube.seed(kubeconfig_secret(release, namespace))

    def uninstall(self, release: str, namespace: str) -> None:
        self.calls.append(("uninstall", release, namespace))
        self.kube.delete("apps/v1", "StatefulSet", release, namespace)

    def install_addon(self, addon: AddonChart, kubeconfig: str) -> None:
        self.addon_calls.append(("install", addon.name))
        if self.addon_failures:
            raise self.addon_failures.pop(0)
        self.addons[addon.name] = addon

    def uninstall_addon(self, name: str, kubeconfig: str) -> None:
        self.addon_calls.append(("uninstall", name))
        if self.addon_failures:
            raise self.addon_failures.pop(0)
        self.addons.pop(name, None)

    @property
    def installs(self) -> int:
        return sum(1 for call in self.calls if call[0] == "install")


def kubeconfig_secret(release: str, namespace: str) -> dict[str, object]:
    return simulated.kubeconfig_secret(release, namespace,
                                       virtual_clusters.admin_kubeconfig(VC_SERVER))


def cluster_settings(**overrides: object) -> Settings:
    return Settings(env="test", database_url="sqlite://", **overrides)  # type: ignore[arg-type]


@dataclass
class Harness:
    database: Database
    kube: InMemoryKube
    connector: FakeConnector
    installer: FakeInstaller
    clock: Clock
    reconciler: ClusterReconciler

    @classmethod
    def build(cls, database: Database, *, host: bool = True, settings: Settings | None = None,
              normalize_quantities: bool = False) -> Harness:
        kube = InMemoryKube(normalize_quantities=normalize_quantities)
        connector = FakeConnector(kube if host else None)
        installer = FakeInstaller(kube)
        clock = Clock()
        reconciler = ClusterReconciler(settings or cluster_settings(), database, connector,
                                       installer, clock=clock)
        return cls(database, kube, connector, installer, clock, reconciler)

    def run(self, worker: str = "worker-1", *, later: float = 301.0) -> int:
        """One worker pass after ``later`` seconds (past any backoff, lease or resync)."""
        self.clock.advance(later)
        return run_cluster_kinds(self.reconciler, worker)

    def converge(self, passes: int = 10) -> None:
        for _ in range(passes):
            self.run()

    def cluster(self, cluster_id: int) -> VirtualCluster | None:
        with self.database.session() as db:
            return db.scalar(select(VirtualCluster).where(VirtualCluster.id == cluster_id))

    def item(self, cluster_id: int) -> WorkItem:
        """The cluster's work item in the worker's queue."""
        with self.database.session() as db:
            found = db.get(WorkItem, (CLUSTERS, str(cluster_id)))
        assert found is not None, f"cluster {cluster_id} is not in the work queue"
        return found

    def due_at(self, cluster_id: int) -> datetime:
        """When the worker looks at the cluster next."""
        return self.item(cluster_id).due_at

    def leases(self, worker: str = "worker-1") -> HeldLeases:
        """The leases the pass running as ``worker`` holds (its heartbeat)."""
        held = runtime_of(self.reconciler, worker).held
        assert held is not None, f"no pass of {worker} has run"
        return held

    def managed_objects(self) -> list[tuple[str, str | None, str]]:
        """(kind, namespace, name) of everything on the host but the default namespaces."""
        found = []
        for obj in self.kube.objects():
            meta = obj["metadata"]
            if obj["kind"] == "Namespace" and meta["name"] in ("default", "kube-system",
                                                               "kube-public"):
                continue
            found.append((obj["kind"], meta.get("namespace"), meta["name"]))
        return sorted(found, key=str)


def create(database: Database, tenancy: Tenancy, name: str = "train", *, gpus: int = 4,
           placement: str = "shared-pool", settings: Settings | None = None,
           memory_mib: int = 65536) -> ClusterOut:
    principal: Principal = tenancy.principal(tenancy.acme_admin)
    payload = ClusterCreate(name=name, placement=placement,
                            gpu_class_id=tenancy.h100.id, gpus=gpus, cpu_millicores=8000,
                            memory_mib=memory_mib)
    with database.transaction() as db:
        return service.create_cluster(db, principal, settings or cluster_settings(), "acme",
                                      payload)


def seed_clusters(database: Database, count: int, slug: str = "acme") -> list[int]:
    """``count`` clusters c0, c1, ... of a new tenant, created through the service."""
    with database.transaction() as db:
        tenant = factories.tenant(db, slug)
        admin = factories.user(db)
        factories.membership(db, tenant, admin, "admin")
        principal = Principal(user=admin, via="token", roles={tenant.id: "admin"})
        return [service.create_cluster(db, principal, cluster_settings(), slug,
                                       ClusterCreate(name=f"c{i}")).id for i in range(count)]
