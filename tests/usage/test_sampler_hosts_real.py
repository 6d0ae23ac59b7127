"""Use samples from two real host clusters (the environment's host ``eu`` and a registered
``us``, each its own kube-apiserver): each is read through its own client, its objects count
for the clusters and nodes placed on it only, and stopping ``us``'s API server leaves ``eu``
sampled, ``us``'s earlier samples kept."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.auth.principal import Principal
from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts
from app.hosts.schemas import HostCredentialsIn, HostRegister
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name, host_namespace_name
from app.reconcilers.usage import UsageSampler
from app.usage.models import UsageSample
from tests import factories
from tests.clusters.cleanup import remove_tenant_objects
from tests.clusters.support import cluster_settings
from tests.support.drive import run_due
from tests.support.kube_server import ApiServer
from tests.support.kubectl import Kubectl
from tests.usage.support import LedgerClock, fix_clock

pytestmark = pytest.mark.kube_server


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


@dataclass
class TwoHosts:
    slug: str
    ids: dict[str, int]
    node: str
    sampler: UsageSampler


def _queue(slug: str, cluster: str, kai: Kubectl, portal: Kubectl, allocated: str) -> None:
    name = cluster_queue_name(slug, cluster)
    portal.create({"apiVersion": lbl.KAI_API_VERSION, "kind": "Queue",
                   "metadata": {"name": name, "labels": lbl.cluster_labels(slug, cluster)},
                   "spec": {"parentQueue": slug, "resources": {
                       "gpu": {"quota": 4, "limit": 4, "overQuotaWeight": 1}}}})
    kai.merge_patch(lbl.KAI_API_VERSION, "Queue", name, None,
                    {"status": {"allocated": {lbl.GPU_RESOURCE: allocated},
                                "requested": {lbl.GPU_RESOURCE: allocated}}},
                    subresource="status")


def _running_pod(kubelet: Kubectl, slug: str, node: str, gpus: int) -> None:
    namespace = host_namespace_name(slug, "pods")
    kubelet.apply({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": namespace, "labels": {lbl.TENANT: slug}}})
    kubelet.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": namespace}})
    container: dict[str, Any] = {"name": "train", "image": "registry.example/train:1",
                                 "resources": {"limits": {lbl.GPU_RESOURCE: str(gpus)}}}
    kubelet.create({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "train-0", "namespace": namespace},
                    "spec": {"nodeName": node, "automountServiceAccountToken": False,
                             "containers": [container]}})
    kubelet.merge_patch("v1", "Pod", "train-0", namespace, {"status": {"phase": "Running"}},
                        subresource="status")


def _objects(server: ApiServer, workdir: Path, slug: str, clusters: dict[str, str],
             node: str, gpus: int) -> None:
    writers = {m: Kubectl(server, workdir / m, manager=m)
               for m in ("gpu-tenant-portal", "kai-queue-controller", "kubelet")}
    try:
        for cluster, allocated in clusters.items():
            _queue(slug, cluster, writers["kai-queue-controller"], writers["gpu-tenant-portal"],
                   allocated)
        _running_pod(writers["kubelet"], slug, node, gpus)
    finally:
        for writer in writers.values():
            writer.close()


@pytest.fixture
def two_hosts(kai_host: ApiServer, host_admin: KubernetesAdapter, us_api: ApiServer,
              database: Database, clock: LedgerClock, tmp_path: Path) -> Iterator[TwoHosts]:
    settings = cluster_settings(
        kubeconfig=str(kai_host.write_admin_kubeconfig(tmp_path / "eu.kubeconfig")),
        worker_resync_seconds=300)
    slug, node = f"sh-{secrets.token_hex(3)}", f"gpu-{secrets.token_hex(3)}"
    with database.transaction() as db:
        admin = Principal(user=factories.user(db, admin=True), via="token")
        us = hosts.register_host(db, admin, settings, HostRegister(
            name=f"gpu-us-{slug}", region="us",
            credentials=HostCredentialsIn(kind="kubeconfig", kubeconfig=us_api.admin_kubeconfig)))
        eu_row, us_row = factories.env_host(db), hosts_repository.host_by_id(db, us.id)
        assert us_row is not None
        tenant, h100 = factories.tenant(db, slug), factories.gpu_class(db, f"H100-{slug}")
        ids = {"train": factories.cluster(db, tenant, eu_row, "train", gpu_class_id=h100.id,
                                          gpus=4).id,
               "eval": factories.cluster(db, tenant, us_row, "eval", gpu_class_id=h100.id,
                                         gpus=2).id}
        for name, row in (("eu-node", eu_row), ("us-node", us_row)):
            found = factories.node(db, row, h100, name=node, gpu_count=8)
            factories.assignment(db, found, tenant)
            ids[name] = found.id
    # The same node name on both hosts; a stray queue for train on us, where train is not.
    _objects(kai_host, tmp_path / "eu", slug, {"train": "3"}, node, 3)
    _objects(us_api, tmp_path / "us", slug, {"eval": "1", "train": "7"}, node, 1)
    us_admin = us_api.adapter()
    # The sampler's schedule runs on the real time moved on as far as the test's clock: the
    # registration enqueued us at the real time, and a restart quicker than us's backoff
    # would otherwise leave it skipped on the pass after it.
    started = clock.now
    sampler = UsageSampler(settings, database, ClientConnector(settings),
                           now=lambda: utcnow() + (clock.now - started))
    yield TwoHosts(slug, ids, node, sampler)
    if not us_api.is_running():
        us_api.restart_apiserver()
    for admin_client in (host_admin, us_admin):
        remove_tenant_objects(admin_client, slug)
    us_admin.close()


def _taken(database: Database, fleet: TwoHosts) -> list[tuple[str, int, float]]:
    subjects = set(fleet.ids.values())
    with database.session() as db:
        rows = db.scalars(select(UsageSample).where(UsageSample.subject_id.in_(subjects))
                          .order_by(UsageSample.taken_s, UsageSample.source,
                                    UsageSample.subject_id)).all()
        return [(s.source, s.subject_id, s.used_gpus) for s in rows]


def test_each_real_host_is_sampled_with_its_own_client_and_a_stopped_one_is_skipped(
    two_hosts: TwoHosts, us_api: ApiServer, database: Database, clock: LedgerClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = two_hosts.ids
    run_due(two_hosts.sampler, "worker-1")
    first = {("queue", ids["train"], 3.0), ("queue", ids["eval"], 1.0),
             ("node", ids["eu-node"], 3.0), ("node", ids["us-node"], 1.0)}
    assert set(_taken(database, two_hosts)) == first

    us_api.stop_apiserver()
    clock.at(minutes=5)
    with caplog.at_level(logging.WARNING):
        run_due(two_hosts.sampler, "worker-1")
    assert f"reading GPU use from host cluster gpu-us-{two_hosts.slug} failed" in caplog.text
    taken = _taken(database, two_hosts)
    assert set(taken[len(first):]) == {("queue", ids["train"], 3.0),
                                       ("node", ids["eu-node"], 3.0)}
    assert set(taken[:len(first)]) == first  # us's samples from before are kept

    us_api.restart_apiserver()
    clock.at(minutes=10)
    run_due(two_hosts.sampler, "worker-1")
    assert set(_taken(database, two_hosts)[len(first) + 2:]) == first
