"""GPUs in use are the GPUs bound now, and pods KAI leaves waiting are told with KAI's reason:
what the usage pass reads on the (in-memory) host, as the quota API, the dashboard, the usage
page and the cluster's API and page show it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.database.core import Database
from app.kube.manifests import labels as lbl
from app.kube.manifests.names import host_namespace_name
from app.kube.memory import InMemoryKube
from app.kube.usage import queue_use, waiting_pods
from tests.support.drive import run_due
from tests.support.tenancy import headers
from tests.support.web import HTML
from tests.usage.support import LedgerClock, fix_clock
from tests.usage.test_sampler import acme_with_a_dedicated_node, pod, queue, quota, sampler

NAMESPACE = host_namespace_name("acme", "train")
NO_ROOM = ("Pod t-acme--train/job-2 cannot be scheduled on node h100-a. reasons: node(s) "
           "didn't have enough resources: GPUs")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def kai_pod(name: str, gpus: int, *, message: str | None = None, node: str | None = None,
            namespace: str = NAMESPACE) -> dict[str, Any]:
    """A pending pod of KAI's scheduler, with the condition KAI writes when it cannot bind it."""
    spec: dict[str, Any] = {"schedulerName": lbl.KAI_SCHEDULER_NAME, "containers": [
        {"name": "c", "image": "x", "resources": {"limits": {lbl.GPU_RESOURCE: str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": "Pending"}
    if message is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "message": message}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}


def test_kais_queue_status_counts_gpus_under_the_resource_name_fractions_included() -> None:
    found = queue_use(queue("acme", "train", "1500m", "3"))
    assert found is not None
    assert (found.allocated_gpus, found.requested_gpus) == (1.5, 3.0)
    # "gpu" names GPUs in a queue's spec only; KAI's status never uses it
    spec_named = queue("acme", "train", "0", "0")
    spec_named["status"] = {"allocated": {"gpu": "4"}, "requested": {"gpu": "4"}}
    found = queue_use(spec_named)
    assert found is not None and found.allocated_gpus == 0.0


def test_waiting_pods_are_kais_unbound_gpu_pods_with_its_most_common_reason() -> None:
    pods = [kai_pod("job-2", 4, message=NO_ROOM), kai_pod("job-3", 4, message=NO_ROOM),
            kai_pod("job-4", 1, message="another reason"),
            kai_pod("job-5", 2),  # KAI has not looked at it yet
            kai_pod("bound", 2, node="h100-a"),  # bound, the kubelet has not started it
            kai_pod("cpu-only", 0, message=NO_ROOM),
            kai_pod("other", 1, message="queue full", namespace="t-globex--x")]
    assert [(w.namespace, w.pods, w.reason) for w in waiting_pods(pods)] == [
        (NAMESPACE, 4, NO_ROOM), ("t-globex--x", 1, "queue full")]


def _quota(client: TestClient, auth: dict[str, str]) -> list[tuple[Any, ...]]:
    rows = client.get("/api/v1/tenants/acme/quota", headers=auth).json()["items"]
    return [(q["allocated_gpus"], q["in_use_gpus"], q["dedicated_gpus"]) for q in rows]


def test_in_use_is_what_kai_bound_plus_the_pods_on_dedicated_nodes_not_the_allocation(
    client: TestClient, database: Database, clock: LedgerClock
) -> None:
    t, node = acme_with_a_dedicated_node(database)
    with database.transaction() as db:
        auth = headers(db, t.acme_viewer)
    page = {**HTML, **auth}
    assert _quota(client, auth) == [(4, None, 8)]  # no host read yet
    host = InMemoryKube()
    # KAI bound 1.5 of the 4 GPUs (a fraction) though pods ask for 4; 2 run on the node
    for obj in (queue("acme", "train", "1500m", "4"), quota("acme", "train", "4", "4"),
                pod("a", node, 2), kai_pod("job-2", 4, message=NO_ROOM)):
        host.seed(obj)
    run_due(sampler(database, host), "worker-1")
    assert _quota(client, auth) == [(4, 3.5, 8)]
    dashboard = client.get("/t/acme", headers=page).text
    assert re.search(r'<td class="in-use">\s*3.5\s*</td>', dashboard)
    usage = client.get("/t/acme/usage", headers=page).text
    train = usage.split('data-cluster="train"')[1].split("</tr>")[0]
    assert re.findall(r'class="(in-use|requested)">([^<]*)<', train) == [
        ("in-use", "1.5"), ("requested", "4.0")]
    assert re.search(r'class="class-total".*?class="in-use">3.5<', usage, flags=re.S)

    # everything stops: 0 in use, not "not sampled"
    host = InMemoryKube()
    host.seed(queue("acme", "train", "0", "0"))
    clock.at(minutes=1)
    run_due(sampler(database, host), "worker-1")
    assert _quota(client, auth) == [(4, 0.0, 8)]


def test_pods_waiting_for_gpus_show_on_the_clusters_api_and_page_with_kais_reason(
    client: TestClient, database: Database, clock: LedgerClock
) -> None:
    t, _ = acme_with_a_dedicated_node(database)
    with database.transaction() as db:
        auth = headers(db, t.acme_viewer)
    page = {**HTML, **auth}
    cluster_url = "/api/v1/tenants/acme/clusters/train"
    assert client.get(cluster_url, headers=auth).json()["waiting_for_gpus"] is None
    host = InMemoryKube()
    for name in ("job-2", "job-3"):
        host.seed(kai_pod(name, 8, message=NO_ROOM))
    run_due(sampler(database, host), "worker-1")

    shown = client.get(cluster_url, headers=auth).json()["waiting_for_gpus"]
    assert (shown["pods"], shown["reason"]) == (2, NO_ROOM)
    assert shown["message"] == f"2 pods wait for GPUs: {NO_ROOM}"
    listed = client.get("/api/v1/tenants/acme/clusters", headers=auth).json()["items"]
    assert [c["waiting_for_gpus"] for c in listed] == [shown]
    html = client.get("/t/acme/clusters/train", headers=page).text
    assert "2 pods wait for GPUs: Pod t-acme--train/job-2 cannot be scheduled" in html

    clock.at(minutes=1)
    run_due(sampler(database, InMemoryKube()), "worker-1")  # bound, or gone
    shown = client.get(cluster_url, headers=auth).json()["waiting_for_gpus"]
    assert (shown["pods"], shown["message"]) == (0, "no pod waits for GPUs")
    assert 'id="gpu-wait"' not in client.get("/t/acme/clusters/train", headers=page).text
