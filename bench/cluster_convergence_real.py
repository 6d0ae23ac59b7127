"""The cluster reconciler at scale on a real kube-apiserver and PostgreSQL.

It starts etcd + kube-apiserver 1.32 with KAI's Queue CRD (``tests/support/kube_server.py``, the
test suite's ``host_api``) and measures, in one run:

1. wall time to converge N new clusters' host objects, one at a time (concurrency 1) and on
   the worker's pool (``--concurrency``), both under one client-side limit (``--qps``/
   ``--burst``, i.e. PORTAL_KUBE_QPS/BURST), with the requests each made; then a few clusters
   on the pool under the default limit (20 qps, burst 40), to show the pool keeps to it;
2. API requests per cluster on a resync of those N unchanged clusters: the reconciler reading
   each object with a GET (before), reading from its list cache (after), and a naive
   reconciler that applies everything on every pass;
3. how long a cluster whose worker process was SIGKILLed in the middle of ``helm upgrade
   --install`` waits before another worker process adopts it (the real worker loop,
   ``HelmInstaller`` and a stand-in helm that hangs for the first worker).

Helm in 1 and 2 is in-process: it writes Secret ``vc-<release>`` with the host's admin client
(not counted) after ``--helm-seconds``; ``/readyz`` through the virtual cluster is answered
without a server (counted, not timed). Needs KUBEBUILDER_ASSETS (``make tools``) and
PostgreSQL (``PORTAL_TEST_PG_DSN``, default postgres@127.0.0.1:5432). Run:

    .venv/bin/python -m bench.cluster_convergence_real [--clusters 1000] [--concurrency 8]

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import String, and_, cast, select, update

from app.clusters import conditions as cond
from app.clusters import desired
from app.clusters.models import VirtualCluster
from app.database import migrate
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube import manifests
from app.kube.adapter import KubernetesAdapter
from app.kube.port import KubePort, Manifest
from app.process.wiring import connect_hooks
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.runtime import Runtime
from app.workqueue import CLUSTERS
from app.workqueue.models import WorkItem
from bench.cluster_convergence import kubeconfig_secret, seed
from tests.clusters.standin_helm import helm_calls, install_standin_helm
from tests.support import postgres
from tests.support.cluster_worker import WorkerProcess, worker_env
from tests.support.drive import beside
from tests.support.installers import FakeInstaller
from tests.support.kube_server import ApiServer, install_crds, kube_assets
from tests.support.paths import KAI_QUEUE_CRD
from tests.support.waiting import wait_for

BEFORE_INSTALL_LEASE = 300.0  # what the install stretched the lease by before this change


class CountingPort:
    """The portal's host adapter, counting writes; every other request it sends is a read."""

    def __init__(self, adapter: KubernetesAdapter) -> None:
        self.adapter = adapter
        self.writes = 0
        self._lock = threading.Lock()

    @property
    def requests(self) -> int:
        return self.adapter.api_calls

    def _wrote(self) -> None:
        with self._lock:
            self.writes += 1

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        self._wrote()
        return self.adapter.apply(obj, force=force)

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> Manifest | None:
        return self.adapter.get(api_version, kind, name, namespace)

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: Mapping[str, str] | None = None) -> list[Manifest]:
        return self.adapter.list(api_version, kind, namespace, label_selector)

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None) -> bool:
        self._wrote()
        return self.adapter.delete(api_version, kind, name, namespace)

    def request_token(self, namespace: str, service_account: str, *, expiration_seconds: int,
                      bound_secret: str | None) -> str:
        self._wrote()
        return self.adapter.request_token(namespace, service_account,
                                          expiration_seconds=expiration_seconds,
                                          bound_secret=bound_secret)


class Connector:
    def __init__(self, port: CountingPort) -> None:
        self.port = port
        self.readyz = 0

    def host(self) -> KubePort | None:
        return self.port

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        raise NotImplementedError

    def ready(self, kubeconfig_yaml: str) -> bool:
        self.readyz += 1
        return True


def standin_helm(admin: KubernetesAdapter, seconds: float) -> FakeInstaller:
    """Brings the control plane up after ``seconds``: Secret vc-<release>, written by helm's
    own client (not the portal's, so not counted)."""

    def bring_up(release: str, namespace: str) -> None:
        admin.apply(kubeconfig_secret(release, namespace), force=True)

    return FakeInstaller(during=lambda _: time.sleep(seconds), brings_up=bring_up)


@dataclass
class Phase:
    name: str
    clusters: int
    requests: int
    writes: int
    seconds: float

    @property
    def reads(self) -> int:
        return self.requests - self.writes

    def per_cluster(self, count: int) -> float:
        return count / self.clusters

    def row(self) -> str:
        rate = self.requests / self.seconds if self.seconds else 0.0
        return (f"{self.name:<52}{self.reads / self.clusters:>8.2f}"
                f"{self.writes / self.clusters:>8.2f}{self.seconds:>9.1f}{rate:>9.0f}")


@dataclass
class Bench:
    server: ApiServer
    admin: KubernetesAdapter
    template: str
    args: argparse.Namespace
    workdir: Path

    def database(self) -> tuple[str, Database]:
        name = postgres.unique_name("bench_vc")
        postgres.create_database(name, template=self.template)
        url = postgres.sqlalchemy_url(name)
        return name, Database(url, pool_size=self.args.concurrency + 4)

    def port(self, limit: tuple[float, int] | None = None) -> CountingPort:
        qps, burst = limit or (self.args.qps, self.args.burst)
        adapter = KubernetesAdapter.from_kubeconfig_yaml(
            self.server.admin_kubeconfig, qps=qps, burst=burst,
            connections=self.args.concurrency + 4)
        return CountingPort(adapter)

    def settings(self, url: str, concurrency: int) -> Settings:
        return Settings(env="test", database_url=url, kube_qps=self.args.qps,
                        kube_burst=self.args.burst, worker_concurrency=concurrency)

    def reconciler(self, database: Database, port: CountingPort, concurrency: int, *,
                   list_cache: bool = True) -> ClusterReconciler:
        return ClusterReconciler(self.settings(database.url, concurrency), database,
                                 Connector(port), standin_helm(self.admin, self.args.helm_seconds),
                                 list_cache=list_cache)

    # ----- 1. convergence of new clusters

    def converge(self, prefix: str, concurrency: int, clusters: int | None = None,
                 limit: tuple[float, int] | None = None) -> tuple[Phase, Database, str]:
        clusters = clusters or self.args.clusters
        name, database = self.database()
        seed(database, clusters, min(self.args.tenants, clusters), prefix)
        port = self.port(limit)
        reconciler = self.reconciler(database, port, concurrency)
        started = time.perf_counter()
        drain(reconciler)
        seconds = time.perf_counter() - started
        ready = count_ready(database)
        assert ready == clusters, f"only {ready} of {clusters} Ready"
        label = f"converge {clusters} new, concurrency {concurrency}"
        if limit is not None:
            label += f", {limit[0]:g} qps/{limit[1]} burst"
        phase = Phase(label, clusters, port.requests, port.writes, seconds)
        port.adapter.close()
        return phase, database, name

    # ----- 2. resync of unchanged clusters

    def resync(self, database: Database, *, list_cache: bool) -> Phase:
        port = self.port()
        reconciler = self.reconciler(database, port, self.args.concurrency,
                                     list_cache=list_cache)
        make_due(database)
        started = time.perf_counter()
        drain(reconciler)
        seconds = time.perf_counter() - started
        how = "list cache (after)" if list_cache else "GET per object (before)"
        phase = Phase(f"resync {self.args.clusters} unchanged, {how}", self.args.clusters,
                      port.requests, port.writes, seconds)
        port.adapter.close()
        return phase

    def naive_resync(self, database: Database) -> Phase:
        """Apply every object, run helm and read the Secret for every cluster, every pass."""
        settings = self.settings(database.url, 1)
        with database.session() as db:
            wanted = [desired.load(db, c, settings) for c in db.scalars(select(VirtualCluster))]
        port = self.port()
        helm = standin_helm(self.admin, 0.0)
        started = time.perf_counter()
        for cluster in wanted:
            for obj in [*manifests.platform_objects(cluster.policy), *cluster.host_objects()]:
                port.apply(obj, force=True)
            helm.install(cluster.release, cluster.namespace, cluster.values_yaml())
            port.get("v1", "Secret", cluster.kubeconfig_secret, cluster.namespace)
        seconds = time.perf_counter() - started
        phase = Phase(f"resync {len(wanted)} unchanged, naive apply-everything", len(wanted),
                      port.requests, port.writes, seconds)
        port.adapter.close()
        return phase

    # ----- 3. a worker killed in helm, adopted by another

    def adoption(self) -> list[float]:
        name, database = self.database()
        count = self.args.crash_clusters
        seed(database, count, 1, "crash")
        folder = self.workdir / "crash"
        folder.mkdir()
        hanging, log = folder / "hangs", folder / "helm.jsonl"
        env = worker_env(
            database_url=database.url, lease_seconds=self.args.lease, poll_seconds=2.0,
            kubeconfig=self.server.write_admin_kubeconfig(folder / "host.kubeconfig"),
            helm=install_standin_helm(folder / "bin"),
            PORTAL_WORKER_CONCURRENCY=str(max(count, 1)), PORTAL_LOG_LEVEL="WARNING",
            HELM_STANDIN_LOG=str(log),
            # the host answers /readyz, so it serves as every virtual cluster here
            HELM_STANDIN_VCLUSTER_KUBECONFIG=str(
                self.server.write_admin_kubeconfig(folder / "vcluster.kubeconfig")))
        first = WorkerProcess.start({**env, "HELM_STANDIN_HANG": str(hanging)},
                                    folder / "first.log")
        second: WorkerProcess | None = None
        try:
            wait_for(lambda: held_by(database, first) == count, "first worker's claims", 120)
            wait_for(lambda: len(helm_calls(log)) == count, "every helm run to start", 120)
            second = WorkerProcess.start(env, folder / "second.log")
            first.kill()
            killed = time.monotonic()
            adopted: dict[int, float] = {}

            def all_adopted() -> bool:
                for cluster_id in adopted_by(database, second):
                    adopted.setdefault(cluster_id, time.monotonic() - killed)
                return len(adopted) == count

            # Asked often: when it first holds is the figure.
            wait_for(all_adopted, "adoption", BEFORE_INSTALL_LEASE + 2 * self.args.lease,
                     every=0.1)
            return sorted(adopted.values())
        finally:
            first.kill()
            if second is not None:
                second.stop()
            database.dispose()
            postgres.drop_database(name)


def drain(reconciler: ClusterReconciler) -> None:
    """The worker's runtime on its pool until nothing is due."""
    Runtime(reconciler.database, [*beside(reconciler), reconciler], identity="bench",
            concurrency=reconciler.settings.worker_concurrency).drain()


def make_due(database: Database) -> None:
    with database.transaction() as db:
        db.execute(update(WorkItem).values(due_at=utcnow()))


def count_ready(database: Database) -> int:
    with database.session() as db:
        return sum(cond.is_true(c, cond.READY) for c in db.scalars(
            select(VirtualCluster.conditions)))


def held_by(database: Database, worker: WorkerProcess) -> int:
    with database.session() as db:
        owners = db.scalars(select(WorkItem.lease_owner).where(WorkItem.kind == CLUSTERS))
        return sum(worker.holds(owner) for owner in owners)


def adopted_by(database: Database, worker: WorkerProcess) -> list[int]:
    """Clusters the worker holds, or that are Ready (it held them and finished)."""
    with database.session() as db:
        rows = db.execute(
            select(VirtualCluster.id, WorkItem.lease_owner, VirtualCluster.conditions)
            .join(WorkItem, and_(WorkItem.kind == CLUSTERS,
                                 WorkItem.key == cast(VirtualCluster.id, String)))).all()
    return [cluster_id for cluster_id, owner, conditions in rows
            if worker.holds(owner) or cond.is_true(conditions, cond.READY)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    assets = kube_assets()
    if assets is None:
        raise SystemExit("set KUBEBUILDER_ASSETS (make tools; "
                         "export KUBEBUILDER_ASSETS=$PWD/.cache/bin)")
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None  # noqa: S108 - private mkdtemp
    workdir = Path(tempfile.mkdtemp(prefix="bench-vc-"))
    server = ApiServer(assets, Path(tempfile.mkdtemp(prefix="kube-bench-", dir=base)),
                       name="bench")
    template = postgres.unique_name("bench_vc_tpl")
    postgres.create_database(template)
    made: list[tuple[str, Database]] = []
    try:
        migrate.upgrade(postgres.sqlalchemy_url(template))
        server.start()
        admin = server.adapter()
        install_crds(admin, KAI_QUEUE_CRD)
        bench = Bench(server, admin, template, args, workdir)
        print(f"real kube-apiserver (etcd on {base or 'disk'}), PostgreSQL; {args.clusters} "
              f"clusters over {args.tenants} tenants; client limit {args.qps:g} qps, burst "
              f"{args.burst}; helm {args.helm_seconds:g}s; lease {args.lease:g}s", flush=True)
        print(f"{'phase':<52}{'reads':>8}{'writes':>8}{'seconds':>9}{'req/s':>9}"
              "   (per cluster)", flush=True)
        sequential, database, name = bench.converge("seq", 1)
        made.append((name, database))
        print(sequential.row(), flush=True)
        concurrent, database, name = bench.converge("con", args.concurrency)
        made.append((name, database))
        print(concurrent.row(), flush=True)
        before = bench.resync(database, list_cache=False)
        print(before.row(), flush=True)
        after = bench.resync(database, list_cache=True)
        print(after.row(), flush=True)
        naive = bench.naive_resync(database)
        print(naive.row(), flush=True)
        tight = (args.tight_qps, args.tight_burst)
        limited, database, name = bench.converge("lim", args.concurrency, args.tight_clusters,
                                                 tight)
        made.append((name, database))
        allowed = tight[1] + tight[0] * limited.seconds
        print(f"{limited.row()}   (the limit allows {allowed:.0f} requests in that time)",
              flush=True)
        adoption = bench.adoption()
        print(f"a worker SIGKILLed in helm: its {len(adoption)} clusters adopted by another "
              f"after {', '.join(f'{s:.1f}' for s in adoption)} s (lease {args.lease:g} s; "
              f"before: only after {BEFORE_INSTALL_LEASE:g} s + the lease)", flush=True)
        admin.close()
    finally:
        for name, database in made:
            database.dispose()
            postgres.drop_database(name)
        postgres.drop_database(template)
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "clusters": args.clusters, "tenants": args.tenants, "concurrency": args.concurrency,
        "qps": args.qps, "burst": args.burst, "helm_seconds": args.helm_seconds,
        "converge_seconds": {"sequential": round(sequential.seconds, 2),
                             "concurrent": round(concurrent.seconds, 2)},
        "converge_speedup": round(sequential.seconds / concurrent.seconds, 2),
        "converge_requests_per_cluster": round(concurrent.requests / args.clusters, 2),
        "resync_reads_per_cluster": {
            "get_per_object_before": round(before.reads / args.clusters, 2),
            "list_cache_after": round(after.reads / args.clusters, 2),
            "naive_apply_everything": round(naive.reads / args.clusters, 2)},
        "resync_writes_per_cluster": {
            "get_per_object_before": round(before.writes / args.clusters, 2),
            "list_cache_after": round(after.writes / args.clusters, 2),
            "naive_apply_everything": round(naive.writes / args.clusters, 2)},
        "resync_seconds": {"get_per_object_before": round(before.seconds, 2),
                           "list_cache_after": round(after.seconds, 2),
                           "naive_apply_everything": round(naive.seconds, 2)},
        "rate_limited": {"qps": args.tight_qps, "burst": args.tight_burst,
                         "requests": limited.requests, "seconds": round(limited.seconds, 2),
                         "requests_per_second": round(limited.requests / limited.seconds, 1)},
        "adoption_seconds": {"max": round(max(adoption), 1), "lease": args.lease,
                             "before_at_least": BEFORE_INSTALL_LEASE + args.lease},
    }


def main() -> None:
    connect_hooks()  # as every process that changes data: the audit trail's outbox listens
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--qps", type=float, default=400.0)
    parser.add_argument("--burst", type=int, default=800)
    parser.add_argument("--helm-seconds", type=float, default=0.0)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--crash-clusters", type=int, default=3)
    parser.add_argument("--tight-qps", type=float, default=20.0,
                        help="the PORTAL_KUBE_QPS default, for the rate-limited phase")
    parser.add_argument("--tight-burst", type=int, default=40)
    parser.add_argument("--tight-clusters", type=int, default=40)
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
