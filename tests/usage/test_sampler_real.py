"""Samples from a real kube-apiserver: the KAI queue status written as KAI's queue controller
writes it (status subresource), the namespace ResourceQuota's status.used kept by the real
controller-manager and quota admission, and a running pod's GPUs on a dedicated node, its
phase written as a kubelet writes it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.core import Database
from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name, host_namespace_name
from app.reconcilers.usage import UsageSampler
from app.usage.models import UsageSample
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.kube_server import ApiServer
from tests.support.kubectl import Kubectl, KubectlError
from tests.support.waiting import wait_for
from tests.usage.support import LedgerClock, fix_clock

pytestmark = pytest.mark.kube_server
GPUS = f"requests.{lbl.GPU_RESOURCE}"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


@pytest.fixture
def writers(kai_host: ApiServer, tmp_path: Path) -> Iterator[dict[str, Kubectl]]:
    clients = {manager: Kubectl(kai_host, tmp_path / manager, manager=manager)
               for manager in ("gpu-tenant-portal", "kai-queue-controller", "kubelet")}
    yield clients
    for client in clients.values():
        client.close()




def _portal_objects(slug: str, portal: Kubectl) -> str:
    """What the cluster reconciler makes for cluster ``train``: namespace, quota, leaf queue."""
    namespace = host_namespace_name(slug, "train")
    labels = lbl.cluster_labels(slug, "train")
    portal.apply({"apiVersion": "v1", "kind": "Namespace",
                  "metadata": {"name": namespace, "labels": labels}})
    portal.apply({"apiVersion": "v1", "kind": "ResourceQuota",
                  "metadata": {"name": "tenant-quota", "namespace": namespace, "labels": labels},
                  "spec": {"hard": {GPUS: "4", f"limits.{lbl.GPU_RESOURCE}": "4"}}})
    portal.apply({"apiVersion": lbl.KAI_API_VERSION, "kind": "Queue",
                  "metadata": {"name": cluster_queue_name(slug, "train"), "labels": labels},
                  "spec": {"parentQueue": slug, "resources": {
                      "gpu": {"quota": 4, "limit": 4, "overQuotaWeight": 1},
                      "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                      "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}})
    return namespace


def _gpu_pod(name: str, namespace: str, node: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "automountServiceAccountToken": False,
                     "containers": [{"name": "train", "image": "registry.example/train:1",
                                     "resources": {"limits": {lbl.GPU_RESOURCE: str(gpus)}}}]}}


def test_samples_come_from_queue_status_quota_status_and_running_pods(
    kai_host: ApiServer, host_admin: KubernetesAdapter, writers: dict[str, Kubectl],
    database: Database, db: Session, clock: LedgerClock,
) -> None:
    slug = f"us-{secrets.token_hex(3)}"
    tenant = factories.tenant(db, slug)
    h100 = factories.gpu_class(db, f"NVIDIA-H100-{slug}")
    cluster = factories.cluster(db, tenant, factories.env_host(db), "train",
                                gpu_class_id=h100.id, gpus=4)
    node = factories.node(db, factories.env_host(db), h100, name=f"{slug}-gpu-1")
    factories.assignment(db, node, tenant)
    db.commit()

    namespace = _portal_objects(slug, writers["gpu-tenant-portal"])
    writers["kubelet"].create({"apiVersion": "v1", "kind": "Node",
                               "metadata": {"name": node.name}})
    wait_for(lambda: (host_admin.get("v1", "ResourceQuota", "tenant-quota", namespace) or {})
              .get("status", {}).get("hard"), "the quota controller to take up the quota")
    wait_for(lambda: _created(writers["kubelet"], _gpu_pod("train-0", namespace, node.name, 3)),
              "quota admission to admit the pod")
    writers["kubelet"].merge_patch("v1", "Pod", "train-0", namespace,
                                   {"status": {"phase": "Running"}}, subresource="status")
    writers["kai-queue-controller"].merge_patch(
        lbl.KAI_API_VERSION, "Queue", cluster_queue_name(slug, "train"), None,
        {"status": {"allocated": {lbl.GPU_RESOURCE: "3", "cpu": "1"},
                    "requested": {lbl.GPU_RESOURCE: "3500m"}}}, subresource="status")

    sampler = UsageSampler(cluster_settings(), database, InMemoryConnector(host_admin))
    assert run_due(sampler, "worker-1") >= 2  # the host and the retention key at least
    mine = db.scalars(select(UsageSample).where(UsageSample.tenant_id == tenant.id)).all()
    by_source = {s.source: (s.subject_id, s.used_gpus, s.allocated_gpus, s.requested_gpus)
                 for s in mine}
    assert by_source == {"queue": (cluster.id, 3.0, 3.0, 3.5),
                         "quota": (cluster.id, 3.0, 4.0, 3.0),
                         "node": (node.id, 3.0, 8.0, 3.0)}


def _created(kubectl: Kubectl, pod: dict[str, Any]) -> bool:
    try:
        kubectl.create(pod)
    except KubectlError as error:  # refused until the default ServiceAccount exists
        if error.status != 403:
            raise
        return False
    return True
