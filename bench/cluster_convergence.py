"""Kubernetes API calls and wall time to converge N virtual clusters, and calls per unchanged
cluster per resync, for the cluster reconciler (reading unchanged objects from its list cache,
and with a GET per object as before) against a naive apply-everything baseline.

All run in this process, one cluster at a time, on the in-memory port (``InMemoryKube``) over
the embedded SQLite default; helm is a stand-in that brings the control plane up at once. The
same on a real kube-apiserver and PostgreSQL, with concurrency and a crashed worker:
``bench.cluster_convergence_real``. Run:

    .venv/bin/python -m bench.cluster_convergence [--clusters 1000] [--tenants 50]
"""

from __future__ import annotations

import argparse
import base64
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import yaml

from app.clusters import desired
from app.clusters.models import VirtualCluster
from app.database import migrate
from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.kube import manifests
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort, Manifest
from app.process.wiring import connect_hooks
from app.quotas.models import TenantQuota
from app.reconcilers.clusters import ClusterReconciler
from app.tenants.models import Tenant
from tests.support.drive import run_due
from tests.support.installers import FakeInstaller

SETTINGS = Settings(env="test", database_url="sqlite://")
KUBECONFIG = yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [],
                             "users": [], "contexts": []})


class Connector:
    def __init__(self, kube: InMemoryKube) -> None:
        self.kube = kube
        self.readyz = 0

    def host(self) -> KubePort | None:
        return self.kube

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return InMemoryKube()

    def ready(self, kubeconfig_yaml: str) -> bool:
        self.readyz += 1
        return True


def standin_helm(kube: InMemoryKube) -> FakeInstaller:
    """Brings the release up at once: the Secret vc-<release> appears."""

    def bring_up(release: str, namespace: str) -> None:
        kube.seed(kubeconfig_secret(release, namespace))

    return FakeInstaller(brings_up=bring_up)


def kubeconfig_secret(release: str, namespace: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": f"vc-{release}", "namespace": namespace},
            "data": {"config": base64.b64encode(KUBECONFIG.encode()).decode()}}


@dataclass
class Figures:
    calls: int
    writes: int
    mutations: int
    helm_runs: int
    readyz: int
    seconds: float


def seed(database: Database, clusters: int, tenants: int, prefix: str = "tenant") -> None:
    """``clusters`` new clusters spread over ``tenants`` tenants ``<prefix>-<n>``."""
    with database.transaction() as db:
        db.add(HostCluster(name="default", is_default=True))
        gpu = GpuClass(product="NVIDIA-H100-80GB-HBM3", display_name="H100", memory_mib=81559)
        db.add(gpu)
        db.flush()
        rows = [Tenant(slug=f"{prefix}-{t}", display_name=f"Tenant {t}") for t in range(tenants)]
        db.add_all(rows)
        db.flush()
        per_tenant = -(-clusters // tenants)
        db.add_all(TenantQuota(tenant_id=t.id, gpu_class_id=gpu.id, gpus=per_tenant)
                   for t in rows)
        db.add_all(VirtualCluster(
            tenant_id=rows[i % tenants].id, host_cluster_id=1, name=f"c{i}",
            kubernetes_version="1.32.4", placement="shared-pool", gpu_class_id=gpu.id, gpus=1,
            cpu_millicores=4000, memory_mib=16384, conditions=[],
            endpoint=f"https://c{i}.{prefix}-{i % tenants}.vc.example.com")
            for i in range(clusters))


def measure(kube: InMemoryKube, connector: Connector, helm: FakeInstaller, run: object) -> Figures:
    kube.reset_calls()
    connector.readyz = 0
    helm.forget()
    started = time.perf_counter()
    assert callable(run)
    run()
    return Figures(len(kube.calls), len(kube.writes()), len(kube.mutations()), helm.runs,
                   connector.readyz, time.perf_counter() - started)


def portal_reconciler(database: Database, kube: InMemoryKube, connector: Connector,
                      helm: FakeInstaller, *, list_cache: bool = True) -> tuple[Figures, Figures]:
    clock_now = [utcnow()]
    reconciler = ClusterReconciler(SETTINGS, database, connector, helm,
                                   clock=lambda: clock_now[0], list_cache=list_cache)

    def drain() -> None:
        while run_due(reconciler, "bench") > 0:
            pass

    converge = measure(kube, connector, helm, drain)
    clock_now[0] += timedelta(seconds=SETTINGS.worker_resync_seconds + 1)
    resync = measure(kube, connector, helm, drain)
    return converge, resync


def get_per_object_reconciler(database: Database, kube: InMemoryKube, connector: Connector,
                              helm: FakeInstaller) -> tuple[Figures, Figures]:
    """The reconciler as it was: each unchanged object read with a GET."""
    return portal_reconciler(database, kube, connector, helm, list_cache=False)


def naive_reconciler(database: Database, kube: InMemoryKube, connector: Connector,
                     helm: FakeInstaller) -> tuple[Figures, Figures]:
    """Apply every object, run helm and check readiness for every cluster on every pass."""
    with database.session() as db:
        wanted = [desired.load(db, c, SETTINGS) for c in db.query(VirtualCluster).all()]

    def apply_everything() -> None:
        for cluster in wanted:
            for obj in [*manifests.platform_objects(cluster.policy), *cluster.host_objects()]:
                kube.apply(obj, force=True)
            helm.install(cluster.release, cluster.namespace, cluster.values_yaml())
            kube.get("v1", "Secret", cluster.kubeconfig_secret, cluster.namespace)
            connector.ready(KUBECONFIG)

    return measure(kube, connector, helm, apply_everything), measure(
        kube, connector, helm, apply_everything)


def run(clusters: int, tenants: int) -> dict[str, tuple[Figures, Figures]]:
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        for index, (name, strategy) in enumerate((
                ("naive apply-everything", naive_reconciler),
                ("reconciler, GET per object", get_per_object_reconciler),
                ("portal reconciler", portal_reconciler))):
            url = f"sqlite:///{Path(directory) / f'{index}.db'}"
            migrate.upgrade(url)
            database = Database(url)
            seed(database, clusters, tenants)
            kube = InMemoryKube()
            results[name] = strategy(database, kube, Connector(kube), standin_helm(kube))
            database.dispose()
    return results


def report(results: dict[str, tuple[Figures, Figures]], clusters: int) -> None:
    print(f"{clusters} clusters, in-memory Kubernetes port, SQLite")
    header = (f"{'strategy':<28}{'phase':<10}{'API calls':>10}{'writes':>8}{'changed':>9}"
              f"{'helm':>6}{'calls/cluster':>15}{'reads/cluster':>15}{'seconds':>9}")
    print(header)
    for name, (converge, resync) in results.items():
        for phase, f in (("converge", converge), ("resync", resync)):
            print(f"{name:<28}{phase:<10}{f.calls:>10}{f.writes:>8}{f.mutations:>9}"
                  f"{f.helm_runs:>6}{f.calls / clusters:>15.2f}"
                  f"{(f.calls - f.writes) / clusters:>15.2f}{f.seconds:>9.2f}")
    print("API calls are host API calls; /readyz through each virtual cluster is one more per "
          "cluster and pass in both strategies.")


def main() -> None:
    connect_hooks()  # as every process that changes data: the audit trail's outbox listens
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--tenants", type=int, default=50)
    args = parser.parse_args()
    report(run(args.clusters, args.tenants), args.clusters)


if __name__ == "__main__":
    main()
