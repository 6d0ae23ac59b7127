"""Real KAI Scheduler: "in use" is what KAI bound (not what the cluster was given), and a GPU pod
no node can take waits, with KAI's reason on the cluster's API, its page and portalctl.

A host of its own with KAI's five programs and kwok keeping two 4-GPU H100 nodes Ready
(tests/support/kai.py); the portal's worker makes the cluster's namespace, quota and queues
there, and the usage pass reads what KAI wrote back. The pages, the API and portalctl are the
portal served on loopback, reading the database only.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.clusters import service
from app.clusters.schemas import ClusterCreate
from app.database.core import Database
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import labels as lbl
from app.reconcilers.usage import UsageSampler
from tests import factories
from tests.clusters.standin_helm import use_standin_helm
from tests.clusters.support import cluster_settings
from tests.portalctl.conftest import PortalCtl
from tests.support import kai
from tests.support.drive import run_due
from tests.support.kai import GpuScheduling
from tests.support.kai import gpu_host as kai_host
from tests.support.kube_server import ApiServer
from tests.support.kubectl import Kubectl
from tests.support.principals import bearer
from tests.support.serving import serving
from tests.support.waiting import wait_for
from tests.support.web import HTML
from tests.usage.support import reconcile_until_ready
from tests.usage.test_kai_real import allocated, placed, synced_pod

pytestmark = [pytest.mark.kube_server, kai.ONE_WORKER]

H100 = "NVIDIA-H100-80GB-HBM3"
NODE_GPUS = 4
GRANTED = 8  # the cluster's GPUs: room in its quota and queue for every pod below
SCHEDULED_WITHIN = 60.0


@pytest.fixture(scope="module")
def gpu_host(kube_assets_dir: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[GpuScheduling]:
    """KAI and kwok with two H100 nodes of 4 GPUs: no pod of 5 GPUs fits on either."""
    with kai_host(kube_assets_dir, tmp_path_factory.mktemp("gpu-host"), "in-use-host", H100,
                  {"h100-a": NODE_GPUS, "h100-b": NODE_GPUS}) as scheduling:
        yield scheduling


def ready_cluster(database: Database, settings: Settings, slug: str) -> tuple[int, str]:
    """The tenant's shared-pool cluster ``train`` made Ready on the host by the real reconciler;
    the cluster id and a tenant admin's API token."""
    with database.transaction() as db:
        _, principal, h100 = factories.gpu_tenant(db, slug, gpus=GRANTED, product=H100)
        created = service.create_cluster(db, principal, settings, slug, ClusterCreate(
            name="train", placement="shared-pool", gpu_class_id=h100.id, gpus=GRANTED,
            cpu_millicores=16000, memory_mib=65536))
        token = bearer(db, principal.user)["Authorization"][7:]
    reconcile_until_ready(settings, database, created.id)
    return created.id, token


def kai_reason(host: KubernetesAdapter, namespace: str, name: str) -> str:
    """What KAI's scheduler wrote into the pod's PodScheduled condition ("" until it has)."""
    pod = host.get("v1", "Pod", name, namespace) or {}
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or "")
    return ""


def test_in_use_is_what_kai_bound_and_a_pod_no_node_fits_waits_with_kais_reason(
        gpu_host: GpuScheduling, host: KubernetesAdapter, database: Database,
        settings: Settings, virtual_api: ApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig = gpu_host.server.write_admin_kubeconfig(tmp_path / "host.kubeconfig")
    worker_settings = cluster_settings(kubeconfig=str(kubeconfig), worker_resync_seconds=0.0)
    use_standin_helm(tmp_path / "helm", monkeypatch, virtual_api.admin_kubeconfig)
    slug = f"use-{secrets.token_hex(3)}"
    _, token = ready_cluster(database, worker_settings, slug)

    # 2 + 1 GPUs fit on the nodes; 5 fit the cluster's 8 GPUs but no node of 4
    namespace, queue = f"t-{slug}--train", f"{slug}--train"
    syncer = Kubectl(gpu_host.server, tmp_path / "syncer", manager="vcluster")
    for name, gpus in (("job-0", 2), ("job-1", 1), ("job-big", 5)):
        syncer.create(synced_pod(name, namespace, queue, gpus=gpus))
    wait_for(lambda: {name: phase for name, (node, phase) in placed(host, namespace).items()
                      if node} == {"job-0": "Running", "job-1": "Running"},
             lambda: f"KAI to run the pods that fit: {placed(host, namespace)}; "
                     f"exited: {gpu_host.exited()}\n{gpu_host.log('scheduler')}",
             timeout=SCHEDULED_WITHIN)
    reason = wait_for(lambda: kai_reason(host, namespace, "job-big"),
                      lambda: f"KAI's reason on job-big: {placed(host, namespace)}",
                      timeout=SCHEDULED_WITHIN)
    assert "job-big" in reason and "GPU" in reason  # KAI names the pod and what it lacks
    wait_for(lambda: allocated(host, queue) == {lbl.GPU_RESOURCE: "3"},
             lambda: f"KAI's allocation of 3 GPUs to {queue}: {allocated(host, queue)}",
             timeout=SCHEDULED_WITHIN)
    sampler_settings = worker_settings.model_copy(update={"worker_resync_seconds": 300.0})
    run_due(UsageSampler(sampler_settings, database, ClientConnector(sampler_settings)),
            "worker-1")

    portal_settings = settings.model_copy(update={"database_url": database.url})
    with serving(portal_settings, database) as url:
        quota = _get(url, f"/api/v1/tenants/{slug}/quota", token)
        assert [(q["allocated_gpus"], q["in_use_gpus"], q["burst_in_use_gpus"])
                for q in quota["items"]] == [(GRANTED, 3.0, 0.0)]
        cluster = _get(url, f"/api/v1/tenants/{slug}/clusters/train", token)
        # the leaf queue's quota, as the API server returns it, is the cluster's GPUs: 3 < 8
        in_use = cluster["gpus_in_use"]
        assert (in_use["guaranteed"], in_use["burst"], in_use["reclaimable"]) == (
            3.0, 0.0, False)
        wait = cluster["waiting_for_gpus"]
        assert (wait["pods"], wait["reason"]) == (1, reason)
        said = f"1 pod waits for GPUs: {reason}"
        assert wait["message"] == said
        page = _get_text(url, f"/t/{slug}/clusters/train", token)
        assert html.escape(said, quote=False) in page

        portalctl = PortalCtl(tmp_path / "home")
        portalctl("login", "--url", url, "--token-stdin",
                  stdin=token + "\n")
        shown = portalctl("clusters", "show", "train", "--tenant", slug)
        assert shown.exit_code == 0, shown.stderr
        assert f"waiting_for_gpus:      {said}" in shown.stdout
        quota_shown = portalctl("quota", "show", "--tenant", slug)
        assert "IN_USE_GPUS" in quota_shown.stdout and " 3.0 " in quota_shown.stdout
        assert "BURST_IN_USE_GPUS" in quota_shown.stdout

    host.delete("v1", "Namespace", namespace)


def _get(url: str, path: str, token: str) -> Any:
    answer = httpx.get(url + path, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _get_text(url: str, path: str, token: str) -> str:
    answer = httpx.get(url + path, headers={"Authorization": f"Bearer {token}", **HTML})
    assert answer.status_code == 200, answer.text
    return answer.text
