"""The real adapter over HTTP against the emulator: CRUD, apply semantics, tokens, retries."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.kube.adapter import KubernetesAdapter, readyz
from app.kube.errors import ApplyConflictError, PermanentKubeError, TransientKubeError
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort
from app.kube.retry import RetryPolicy, TokenBucket
from tests.kube.emulator import KubeEmulator
from tests.kube.test_memory import TENANT_LABEL, namespace, quota, tenant_node_patch

QUEUE_API = "scheduling.run.ai/v2"


def queue(name: str, parent: str | None = None, gpus: int = 8) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": gpus, "limit": -1,
                                                  "overQuotaWeight": 1}}}
    if parent is not None:
        spec["parentQueue"] = parent
    labels = {"gpu-tenant-portal/queue-level": "leaf" if parent else "tenant"}
    return {"apiVersion": QUEUE_API, "kind": "Queue",
            "metadata": {"name": name, "labels": labels}, "spec": spec}


def names(items: list[dict[str, Any]]) -> set[str]:
    return {item["metadata"]["name"] for item in items}


def kubeconfig_for(url: str) -> str:
    return f"""
apiVersion: v1
kind: Config
clusters: [{{name: vc, cluster: {{server: "{url}"}}}}]
users: [{{name: admin, user: {{token: not-checked}}}}]
contexts: [{{name: vc, context: {{cluster: vc, user: admin}}}}]
current-context: vc
"""


@pytest.fixture
def recorded_sleeps() -> list[float]:
    return []


@pytest.fixture
def retrying_adapter(
    kube_emulator: KubeEmulator, recorded_sleeps: list[float]
) -> Iterator[KubernetesAdapter]:
    """Three attempts; sleeps are recorded instead of slept."""
    adapter = KubernetesAdapter.from_host(
        kube_emulator.url, retry=RetryPolicy(attempts=3, base_delay=0.5, max_delay=30.0),
        sleep=recorded_sleeps.append,
    )
    yield adapter
    adapter.close()


# ----- objects


def test_apply_creates_and_reapplying_the_same_manifest_changes_nothing(
    kube_adapter: KubernetesAdapter, kube_emulator: KubeEmulator
) -> None:
    created = kube_adapter.apply(namespace("t-acme-dev", tenant="acme"))
    again = kube_adapter.apply(namespace("t-acme-dev", tenant="acme"))

    assert created["metadata"]["uid"]
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert kube_emulator.stored("v1", "Namespace", "t-acme-dev") == created
    applies = [r for r in kube_emulator.requests() if r[0] == "PATCH"]
    assert applies[0][1] == (
        "/api/v1/namespaces/t-acme-dev?fieldManager=gpu-tenant-portal&force=false")


def test_namespace_get_list_delete(kube_adapter: KubernetesAdapter) -> None:
    kube_adapter.apply(namespace("t-acme-dev", tenant="acme"))
    kube_adapter.apply(namespace("t-other-dev", tenant="other"))

    listed = kube_adapter.list("v1", "Namespace", label_selector={"tenant": "acme"})
    assert names(listed) == {"t-acme-dev"}
    assert listed[0]["kind"] == "Namespace" and listed[0]["apiVersion"] == "v1"
    assert {"default", "t-acme-dev", "t-other-dev"} <= names(kube_adapter.list("v1", "Namespace"))

    assert kube_adapter.delete("v1", "Namespace", "t-acme-dev") is True
    assert kube_adapter.get("v1", "Namespace", "t-acme-dev") is None
    assert kube_adapter.delete("v1", "Namespace", "t-acme-dev") is False


def test_resource_quota_lifecycle_and_namespace_scoping(kube_adapter: KubernetesAdapter) -> None:
    for ns in ("t-a", "t-b"):
        kube_adapter.apply(namespace(ns))
    kube_adapter.apply(quota("gpu", "t-a", gpus="8", tenant="a"))
    kube_adapter.apply(quota("gpu", "t-b", gpus="4", tenant="b"))

    resized = kube_adapter.apply(quota("gpu", "t-a", gpus="16", tenant="a"))
    assert resized["spec"]["hard"]["requests.nvidia.com/gpu"] == "16"
    assert resized["metadata"]["namespace"] == "t-a"

    assert len(kube_adapter.list("v1", "ResourceQuota")) == 2
    only_b = kube_adapter.list("v1", "ResourceQuota", "t-b")
    assert [q["metadata"]["namespace"] for q in only_b] == ["t-b"]
    assert kube_adapter.list("v1", "ResourceQuota", label_selector={"tenant": "b"}) == only_b

    assert kube_adapter.delete("v1", "ResourceQuota", "gpu", "t-a") is True
    assert kube_adapter.get("v1", "ResourceQuota", "gpu", "t-a") is None
    assert kube_adapter.get("v1", "ResourceQuota", "gpu", "t-b") is not None


def test_writing_into_a_missing_namespace_is_permanent(kube_adapter: KubernetesAdapter) -> None:
    with pytest.raises(PermanentKubeError) as missing:
        kube_adapter.apply(quota("gpu", "t-nowhere"))

    assert (missing.value.status, missing.value.reason) == (404, "NotFound")
    assert "t-nowhere" in missing.value.message


def test_deleting_a_namespace_removes_its_contents(kube_adapter: KubernetesAdapter) -> None:
    kube_adapter.apply(namespace("t-acme-dev"))
    kube_adapter.apply(quota("gpu", "t-acme-dev"))

    kube_adapter.delete("v1", "Namespace", "t-acme-dev")

    assert kube_adapter.list("v1", "ResourceQuota", "t-acme-dev") == []


def test_cluster_scoped_kai_queues(kube_adapter: KubernetesAdapter) -> None:
    kube_adapter.apply(queue("acme"))
    kube_adapter.apply(queue("acme-dev", parent="acme", gpus=4))

    leaf = kube_adapter.get(QUEUE_API, "Queue", "acme-dev")
    assert leaf is not None and leaf["spec"]["parentQueue"] == "acme"
    assert "namespace" not in leaf["metadata"]
    leaves = kube_adapter.list(QUEUE_API, "Queue",
                               label_selector={"gpu-tenant-portal/queue-level": "leaf"})
    assert names(leaves) == {"acme-dev"}

    assert kube_adapter.delete(QUEUE_API, "Queue", "acme-dev") is True
    assert names(kube_adapter.list(QUEUE_API, "Queue")) == {"acme"}


def test_node_assignment_on_a_reference_node_keeps_the_nodes_own_labels(
    kube_adapter: KubernetesAdapter, host_nodes: list[dict[str, Any]]
) -> None:
    node = host_nodes[0]
    name = node["metadata"]["name"]

    assigned = kube_adapter.apply(tenant_node_patch(name, "acme"))
    assert assigned["metadata"]["labels"][TENANT_LABEL] == "acme"
    assert assigned["metadata"]["labels"]["nvidia.com/gpu.product"] == (
        node["metadata"]["labels"]["nvidia.com/gpu.product"])
    assert assigned["spec"]["taints"] == [
        {"key": TENANT_LABEL, "value": "acme", "effect": "NoSchedule"}]
    assert assigned["status"]["allocatable"] == node["status"]["allocatable"]

    released = kube_adapter.apply(tenant_node_patch(name, None))
    assert released["metadata"]["labels"] == node["metadata"]["labels"]
    assert released["spec"]["taints"] == []


def test_apply_conflict_is_permanent_unless_forced(
    kube_adapter: KubernetesAdapter, kube_emulator: KubeEmulator
) -> None:
    kube_emulator.seed(namespace("t-acme-dev", tenant="someone-else"))

    with pytest.raises(ApplyConflictError) as conflict:
        kube_adapter.apply(namespace("t-acme-dev", tenant="acme"))
    forced = kube_adapter.apply(namespace("t-acme-dev", tenant="acme"), force=True)

    assert conflict.value.status == 409
    assert kube_adapter.api_calls == 2  # a conflict is not retried
    assert forced["metadata"]["labels"]["tenant"] == "acme"


# ----- tokens


def test_token_request_bound_to_a_secret(
    kube_adapter: KubernetesAdapter, kube_emulator: KubeEmulator
) -> None:
    kube_adapter.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "alice-view", "namespace": "default"}})
    kube_adapter.apply({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "grant-1", "namespace": "default"}})

    token = kube_adapter.request_token("default", "alice-view", expiration_seconds=3600,
                                       bound_secret="grant-1")

    assert token.count(".") == 2
    assert kube_emulator.tokens == [{
        "namespace": "default", "service_account": "alice-view", "bound_secret": "grant-1",
        "expiration_seconds": 3600, "token": token,
    }]


def test_token_request_errors(kube_adapter: KubernetesAdapter) -> None:
    with pytest.raises(ValueError, match="600"):
        kube_adapter.request_token("default", "alice-view", expiration_seconds=300,
                                   bound_secret=None)
    assert kube_adapter.api_calls == 0

    with pytest.raises(PermanentKubeError) as missing:
        kube_adapter.request_token("default", "alice-view", expiration_seconds=600,
                                   bound_secret=None)
    assert missing.value.reason == "NotFound"


# ----- retries and error classification


def test_throttling_is_retried_honouring_retry_after(
    retrying_adapter: KubernetesAdapter, kube_emulator: KubeEmulator, recorded_sleeps: list[float]
) -> None:
    kube_emulator.fail(r"/namespaces/t-acme-dev$", 429, method="PATCH", times=2,
                       headers={"Retry-After": "1"}, reason="TooManyRequests")

    applied = retrying_adapter.apply(namespace("t-acme-dev"))

    assert applied["metadata"]["name"] == "t-acme-dev"
    assert retrying_adapter.api_calls == 3
    assert recorded_sleeps == [1.0, 1.0]


def test_server_errors_exhaust_attempts_then_raise_transient_with_a_delay(
    retrying_adapter: KubernetesAdapter, kube_emulator: KubeEmulator, recorded_sleeps: list[float]
) -> None:
    kube_emulator.fail(r"/api/v1/nodes", 500, times=10, reason="InternalError",
                       message="etcd is sad")

    with pytest.raises(TransientKubeError) as failure:
        retrying_adapter.list("v1", "Node")

    assert retrying_adapter.api_calls == 3
    assert (failure.value.status, failure.value.reason) == (500, "InternalError")
    assert failure.value.message == "etcd is sad"
    assert failure.value.delay_seconds is not None and 0 < failure.value.delay_seconds <= 2.0
    assert len(recorded_sleeps) == 2 and all(0 < s <= 1.0 for s in recorded_sleeps)


def test_a_long_retry_after_is_handed_to_the_reconciler_at_once(
    retrying_adapter: KubernetesAdapter, kube_emulator: KubeEmulator
) -> None:
    kube_emulator.fail(r"/api/v1/nodes", 429, times=5, headers={"Retry-After": "120"})

    with pytest.raises(TransientKubeError) as failure:
        retrying_adapter.list("v1", "Node")

    assert failure.value.delay_seconds == 120.0
    assert retrying_adapter.api_calls == 1


def test_conflict_on_a_non_apply_write_is_retried(
    retrying_adapter: KubernetesAdapter, kube_emulator: KubeEmulator
) -> None:
    retrying_adapter.apply(namespace("t-acme-dev"))
    kube_emulator.fail(r"/namespaces/t-acme-dev$", 409, method="DELETE", reason="Conflict")

    assert retrying_adapter.delete("v1", "Namespace", "t-acme-dev") is True
    assert retrying_adapter.api_calls == 3


@pytest.mark.parametrize(("status", "reason"), [(403, "Forbidden"), (422, "Invalid")])
def test_client_errors_are_permanent_and_not_retried(
    retrying_adapter: KubernetesAdapter, kube_emulator: KubeEmulator, status: int, reason: str
) -> None:
    kube_emulator.fail(r"/apis/scheduling.run.ai/v2/queues/acme$", status, reason=reason,
                       message=f'queues "acme" is {reason.lower()}')

    with pytest.raises(PermanentKubeError) as failure:
        retrying_adapter.apply(queue("acme"))

    assert (failure.value.status, failure.value.reason) == (status, reason)
    assert failure.value.message == f'queues "acme" is {reason.lower()}'
    assert retrying_adapter.api_calls == 1


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_an_unreachable_server_is_transient_after_the_attempts() -> None:
    adapter = KubernetesAdapter.from_host(
        f"http://127.0.0.1:{unused_port()}", retry=RetryPolicy(attempts=2, base_delay=0.01),
        sleep=lambda _s: None,
    )

    with pytest.raises(TransientKubeError) as failure:
        adapter.get("v1", "Namespace", "default")

    assert failure.value.reason == "ConnectionError"
    assert adapter.api_calls == 2


def test_token_bucket_lets_a_burst_through_then_paces_at_qps() -> None:
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(qps=10, burst=2, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        bucket.acquire()

    assert sleeps == pytest.approx([0.1, 0.1, 0.1])


def test_threads_sharing_a_token_bucket_keep_to_its_rate_together() -> None:
    """The worker's reconcile threads share the host adapter's one bucket: however their
    calls interleave, the n-th call waits until burst + qps * t allows it."""
    waits: list[float] = []
    lock = threading.Lock()

    def sleep(seconds: float) -> None:
        with lock:
            waits.append(seconds)

    bucket = TokenBucket(qps=10, burst=2, clock=lambda: 0.0, sleep=sleep)
    start = threading.Barrier(8)

    def calls() -> None:
        start.wait()
        for _ in range(5):
            bucket.acquire()

    threads = [threading.Thread(target=calls) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(waits) == pytest.approx([(n - 2) / 10 for n in range(3, 41)])


# ----- construction and readiness


def test_from_kubeconfig_talks_to_the_configured_server(
    kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_for(kube_emulator.url))

    adapter = KubernetesAdapter.from_kubeconfig(str(path), context="vc")

    assert adapter.get("v1", "Namespace", "kube-system") is not None


def test_readyz(kube_emulator: KubeEmulator) -> None:
    assert readyz(kubeconfig_for(kube_emulator.url)) is True
    assert readyz(kubeconfig_for(f"http://127.0.0.1:{unused_port()}")) is False
    assert readyz("this: [is not a kubeconfig") is False


# ----- the fake and the adapter agree on what reconcilers rely on


@pytest.fixture(params=["memory", "adapter"])
def port(request: pytest.FixtureRequest) -> KubePort:
    if request.param == "memory":
        return InMemoryKube()
    adapter: KubernetesAdapter = request.getfixturevalue("kube_adapter")
    return adapter


def converge(port: KubePort) -> Callable[[], list[dict[str, Any]]]:
    def run() -> list[dict[str, Any]]:
        return [port.apply(namespace("t-acme-dev", tenant="acme")),
                port.apply(quota("gpu", "t-acme-dev", gpus="8")),
                port.apply(queue("acme"))]
    return run


def test_port_contract_second_converge_changes_no_resource_version(port: KubePort) -> None:
    first = converge(port)()
    second = converge(port)()

    assert [o["metadata"]["resourceVersion"] for o in second] == [
        o["metadata"]["resourceVersion"] for o in first]


def test_port_contract_missing_objects(port: KubePort) -> None:
    assert port.get("v1", "Namespace", "t-nothing") is None
    assert port.delete(QUEUE_API, "Queue", "nothing") is False
    assert port.list("v1", "ResourceQuota", "default") == []
