"""The cluster reconciler across hosts, on in-memory hosts: each cluster through its own host's
client and installer; a host that does not answer marks its clusters (last known state kept,
nothing deleted) and is backed off as a whole; a slow host holds up only its own clusters."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import select

from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import service
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate, ClusterResize
from app.database.core import Database
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.kube.connector import HostTarget
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort, Manifest
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.runtime import Runtime
from tests import factories
from tests.clusters.support import Clock, FakeConnector, cluster_settings, fake_installer
from tests.support.drive import beside, run_due
from tests.support.installers import FakeInstaller
from tests.support.waiting import wait_for

SETTINGS = cluster_settings()


class Hosts(FakeConnector):
    """One in-memory API server per host id."""

    def __init__(self, kubes: dict[int, KubePort]) -> None:
        super().__init__(None)
        self.kubes = kubes

    def for_host(self, target: HostTarget) -> KubePort | None:
        return self.kubes.get(target.host_id)


def per_host(kubes: dict[int, InMemoryKube]) -> FakeInstaller:
    """The stand-in helm, run against the cluster's own host."""
    installers: dict[int, FakeInstaller] = {}

    def for_host(target: HostTarget) -> FakeInstaller:
        return installers.setdefault(target.host_id, fake_installer(kubes[target.host_id]))

    return FakeInstaller(brings_up=unknown_host, takes_down=unknown_host, for_host=for_host)


def unknown_host(release: str, namespace: str) -> None:
    raise AssertionError("helm ran without knowing the host")


@dataclass
class TwoHosts:
    database: Database
    eu: InMemoryKube
    us: InMemoryKube
    eu_id: int
    us_id: int
    tenant: Principal
    h100: int
    clock: Clock
    reconciler: ClusterReconciler

    def create(self, name: str, region: str) -> int:
        payload = ClusterCreate(name=name, region=region, gpu_class_id=self.h100, gpus=1)
        with self.database.transaction() as db:
            return service.create_cluster(db, self.tenant, SETTINGS, "acme", payload).id

    def run(self) -> int:
        self.clock.advance(301)
        return run_due(self.reconciler, "worker-1")

    def cluster(self, cluster_id: int) -> VirtualCluster | None:
        with self.database.session() as db:
            return db.scalar(select(VirtualCluster).where(VirtualCluster.id == cluster_id))

    def ready(self, cluster_id: int) -> bool:
        cluster = self.cluster(cluster_id)
        return cluster is not None and cond.is_true(cluster.conditions, cond.READY) and (
            cluster.observed_generation == cluster.generation)


def two_hosts(database: Database, *, us_port: KubePort | None = None,
              settings: Settings = SETTINGS, **reconciler: Any) -> TwoHosts:
    with database.transaction() as db:
        eu = factories.env_host(db)
        eu.region = "eu"
        us = factories.registered_host(db, "gpu-us-1", region="us")
        h100 = factories.gpu_class(db, display_name="H100")
        tenant = factories.tenant(db, "acme")
        admin = factories.user(db)
        factories.membership(db, tenant, admin, "admin")
        for host, region in ((eu, "eu"), (us, "us")):
            factories.node(db, host, h100, gpu_count=8)
            factories.quota(db, tenant, h100, 4, region=region)
        ids = eu.id, us.id
        principal = Principal(user=admin, via="token", roles={tenant.id: "admin"})
        gpu = h100.id
    kubes = {ids[0]: InMemoryKube(), ids[1]: InMemoryKube()}
    ports: dict[int, KubePort] = {ids[0]: kubes[ids[0]], ids[1]: us_port or kubes[ids[1]]}
    clock = Clock()
    worker = ClusterReconciler(settings, database, Hosts(ports), per_host(kubes),
                               clock=clock, **reconciler)
    return TwoHosts(database, kubes[ids[0]], kubes[ids[1]], *ids, principal, gpu, clock, worker)


def namespaces(kube: InMemoryKube) -> set[str]:
    return {o["metadata"]["name"] for o in kube.objects()
            if o["kind"] == "Namespace" and o["metadata"]["name"].startswith("t-")}


def test_each_cluster_goes_to_its_own_host_only(database: Database) -> None:
    fleet = two_hosts(database)
    train, serve = fleet.create("train", "eu"), fleet.create("serve", "us")
    fleet.run()
    assert fleet.ready(train) and fleet.ready(serve)
    assert namespaces(fleet.eu) == {"t-acme--train"}
    assert namespaces(fleet.us) == {"t-acme--serve"}
    # a second pass changes nothing on either host
    before = len(fleet.eu.mutations()), len(fleet.us.mutations())
    fleet.run()
    assert (len(fleet.eu.mutations()), len(fleet.us.mutations())) == before


def test_an_unreachable_host_marks_its_clusters_backs_off_and_deletes_nothing(
    database: Database,
) -> None:
    fleet = two_hosts(database)
    one, two, eu = fleet.create("one", "us"), fleet.create("two", "us"), fleet.create("e", "eu")
    fleet.run()
    assert fleet.ready(one) and fleet.ready(two)
    with database.transaction() as db:
        service.delete_cluster(db, fleet.tenant, "acme", "two")
        service.resize_cluster(db, fleet.tenant, "acme", "e", ClusterResize(gpus=0))
    down = threading.Event()
    down.set()
    fleet.us.inject("*", ConnectionRefusedError(111, "Connection refused"), times=1000,
                    match=lambda _call: down.is_set())
    calls = len(fleet.us.calls)
    fleet.run()
    # one call found the host gone; the other cluster of the host made none
    assert len(fleet.us.calls) == calls + 1
    assert fleet.ready(eu)  # the other host's cluster went on
    for cluster_id in (one, two):
        cluster = fleet.cluster(cluster_id)
        assert cluster is not None  # never deleted while the host is away
        reachable = cond.find(cluster.conditions, cond.HOST_REACHABLE)
        assert reachable is not None and reachable["reason"] == cond.HOST_UNREACHABLE
        assert cond.is_true(cluster.conditions, cond.READY)  # as last known
    assert namespaces(fleet.us) == {"t-acme--one", "t-acme--two"}

    fleet.us._faults.clear()
    for _ in range(3):
        fleet.run()
    assert fleet.ready(one) and fleet.cluster(two) is None
    back = fleet.cluster(one)
    assert back is not None and cond.is_true(back.conditions, cond.HOST_REACHABLE)
    assert namespaces(fleet.us) == {"t-acme--one"}


class SlowPort:
    """A host whose writes wait until released: a host that answers very slowly."""

    def __init__(self, kube: InMemoryKube) -> None:
        self.kube = kube
        self.release = threading.Event()

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        self.release.wait(30)
        return self.kube.apply(obj, force=force)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


@pytest.fixture
def slow_us(own_pg_database: Database) -> Iterator[tuple[TwoHosts, SlowPort]]:
    port = SlowPort(InMemoryKube())
    fleet = two_hosts(own_pg_database, us_port=port)
    port.kube = fleet.us
    yield fleet, port
    port.release.set()


def test_a_slow_host_holds_up_only_its_own_clusters(
    slow_us: tuple[TwoHosts, SlowPort],
) -> None:
    """Even when more of the slow host's clusters are due than the worker has threads: the
    host gets its share of the pool (half), and the other host's cluster goes on."""
    fleet, us = slow_us
    runtime = Runtime(fleet.database, [*beside(fleet.reconciler), fleet.reconciler],
                      concurrency=2, poll_seconds=0.1)
    slow = [fleet.create(name, "us") for name in ("serve", "infer", "batch")]
    eu = fleet.create("train", "eu")  # due last
    worker = threading.Thread(target=runtime.run, name="worker-under-test")
    worker.start()
    try:
        wait_for(lambda: fleet.ready(eu), "the cluster on the answering host", timeout=20)
        assert not any(fleet.ready(cluster) for cluster in slow)
        us.release.set()
        wait_for(lambda: all(fleet.ready(cluster) for cluster in slow),
                 "the clusters on the slow host", timeout=30)
    finally:
        us.release.set()
        runtime.stop()
        worker.join(30)


def test_a_shared_pool_cluster_says_so_when_its_host_loses_its_webhook_url(
    database: Database,
) -> None:
    """Placed while the host had a webhook URL; once it has none, the host refuses the
    cluster's pods (the queue guard) and the cluster carries why, until the URL is back."""
    fleet = two_hosts(database)
    serve = fleet.create("serve", "us")
    fleet.run()
    assert fleet.ready(serve)
    found = fleet.cluster(serve)
    assert found is not None and cond.find(found.conditions, cond.POD_ADMISSION) is None

    def set_url(url: str | None) -> None:
        with database.transaction() as db:
            host = db.get(HostCluster, fleet.us_id)
            assert host is not None
            host.webhook_url = url

    set_url(None)
    fleet.run()
    found = fleet.cluster(serve)
    assert found is not None
    admission = cond.find(found.conditions, cond.POD_ADMISSION)
    assert admission is not None and admission["status"] == "False"
    assert admission["reason"] == cond.NO_WEBHOOK_URL
    assert "host cluster gpu-us-1 has no admission webhook URL" in admission["message"]
    set_url("https://webhook.gpu-us-1.example:9443")
    fleet.run()
    found = fleet.cluster(serve)
    assert found is not None and cond.is_true(found.conditions, cond.POD_ADMISSION)


def _set_webhook_url(fleet: TwoHosts, url: str | None) -> None:
    with fleet.database.transaction() as db:
        host = db.get(HostCluster, fleet.us_id)
        assert host is not None
        host.webhook_url = url


def _admission(fleet: TwoHosts, cluster_id: int) -> dict[str, Any] | None:
    found = fleet.cluster(cluster_id)
    assert found is not None
    return cond.find(found.conditions, cond.POD_ADMISSION)


def test_a_hardened_cluster_says_so_when_its_host_loses_its_webhook_url(
    database: Database,
) -> None:
    """On vCluster Pro a shared-pool cluster needs no webhook, but a hardened one (here moved
    to user namespaces, as an upgrade to such a template would) does: without a URL the
    hardening guard refuses its pods that do not set their hardening themselves, and the
    cluster carries why, until the URL is back; an unhardened neighbour carries nothing."""
    fleet = two_hosts(database, settings=cluster_settings(vcluster_edition="pro"))
    serve, plain = fleet.create("serve", "us"), fleet.create("plain", "us")
    with database.transaction() as db:
        cluster = db.get(VirtualCluster, serve)
        assert cluster is not None
        cluster.user_namespaces = True
    _set_webhook_url(fleet, None)
    fleet.run()
    admission = _admission(fleet, serve)
    assert admission is not None and admission["status"] == "False"
    assert admission["reason"] == cond.NO_WEBHOOK_URL
    assert admission["message"] == (
        "host cluster gpu-us-1 has no admission webhook URL, so its API server cannot reach "
        "the portal's webhook and refuses this cluster's pods that do not set hostUsers: "
        "false and a seccomp profile (RuntimeDefault or Localhost) themselves rather than run "
        "them unhardened; a platform admin sets the host's webhook URL")
    assert _admission(fleet, plain) is None
    _set_webhook_url(fleet, "https://webhook.gpu-us-1.example:9443")
    fleet.run()
    found = fleet.cluster(serve)
    assert found is not None and cond.is_true(found.conditions, cond.POD_ADMISSION)
    assert _admission(fleet, plain) is None


def test_the_condition_names_every_reason_the_pods_need_the_webhook() -> None:
    message = cond.no_webhook_message("gpu-us-1", True, "seccomp")
    assert "rather than run them outside the KAI queue, and refuses this cluster's pods " \
           "that do not set a seccomp profile (RuntimeDefault or Localhost) themselves " \
           "rather than run them unhardened" in message
    assert cond.no_webhook_message("gpu-us-1", True, None) == (
        "host cluster gpu-us-1 has no admission webhook URL, so its API server cannot reach "
        "the portal's webhook and refuses this cluster's pods rather than run them outside "
        "the KAI queue; a platform admin sets the host's webhook URL")
