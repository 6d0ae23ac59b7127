"""The in-memory fake: the server behaviours reconcilers rely on, and fault injection."""

from __future__ import annotations

from typing import Any

import pytest

from app.kube.errors import ApplyConflictError, PermanentKubeError, TransientKubeError
from app.kube.memory import InMemoryKube, KubeCall

TENANT_LABEL = "gpu-tenant-portal/tenant"


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def quota(name: str, ns: str, gpus: str = "8", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"hard": {"requests.nvidia.com/gpu": gpus}},
    }


def gpu_node(name: str = "h100-1") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def tenant_node_patch(name: str, tenant: str | None) -> dict[str, Any]:
    """The partial Node manifest a node-assignment reconciler applies."""
    meta: dict[str, Any] = {"name": name}
    spec: dict[str, Any] = {}
    if tenant is not None:
        meta["labels"] = {TENANT_LABEL: tenant}
        spec["taints"] = [{"key": TENANT_LABEL, "value": tenant, "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}


def test_apply_creates_with_server_metadata_and_second_apply_changes_nothing(
    memory_kube: InMemoryKube,
) -> None:
    created = memory_kube.apply(namespace("t-acme-dev", tenant="acme"))
    again = memory_kube.apply(namespace("t-acme-dev", tenant="acme"))

    assert created["metadata"]["uid"] and created["metadata"]["generation"] == 1
    assert again == created
    assert [c.method for c in memory_kube.mutations()] == ["apply"]
    assert [c.method for c in memory_kube.writes()] == ["apply", "apply"]


def test_spec_change_bumps_generation_but_label_change_does_not(memory_kube: InMemoryKube) -> None:
    first = memory_kube.apply(quota("gpu", "default", gpus="8"))
    relabelled = memory_kube.apply(quota("gpu", "default", gpus="8", tier="gold"))
    resized = memory_kube.apply(quota("gpu", "default", gpus="16", tier="gold"))

    assert relabelled["metadata"]["generation"] == 1
    assert relabelled["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    assert resized["metadata"]["generation"] == 2
    assert resized["metadata"]["uid"] == first["metadata"]["uid"]


def test_fields_no_longer_applied_are_removed_but_other_writers_fields_stay(
    memory_kube: InMemoryKube,
) -> None:
    memory_kube.seed(namespace("shared", owner="someone-else"))
    memory_kube.apply(namespace("shared", tenant="acme", cluster="dev"))
    result = memory_kube.apply(namespace("shared", tenant="acme"))

    assert result["metadata"]["labels"] == {"owner": "someone-else", "tenant": "acme"}


def test_node_assignment_taint_merges_by_key_and_effect_and_unassign_removes_only_ours(
    memory_kube: InMemoryKube,
) -> None:
    memory_kube.seed(gpu_node())

    assigned = memory_kube.apply(tenant_node_patch("h100-1", "acme"))
    assert assigned["metadata"]["labels"][TENANT_LABEL] == "acme"
    assert {(t["key"], t["effect"]) for t in assigned["spec"]["taints"]} == {
        ("nvidia.com/gpu", "NoSchedule"), (TENANT_LABEL, "NoSchedule"),
    }
    assert assigned["status"] == gpu_node()["status"]

    released = memory_kube.apply(tenant_node_patch("h100-1", None))
    assert released["metadata"]["labels"] == gpu_node()["metadata"]["labels"]
    assert released["spec"]["taints"] == gpu_node()["spec"]["taints"]


def test_apply_conflicts_on_a_field_another_writer_set_unless_forced(
    memory_kube: InMemoryKube,
) -> None:
    memory_kube.seed(namespace("t-acme-dev", tenant="someone-else"))

    with pytest.raises(ApplyConflictError) as conflict:
        memory_kube.apply(namespace("t-acme-dev", tenant="acme"))
    forced = memory_kube.apply(namespace("t-acme-dev", tenant="acme"), force=True)

    assert conflict.value.status == 409 and "metadata.labels.tenant" in conflict.value.message
    assert forced["metadata"]["labels"]["tenant"] == "acme"


def test_namespaced_write_needs_the_namespace_and_namespace_delete_removes_contents(
    memory_kube: InMemoryKube,
) -> None:
    with pytest.raises(PermanentKubeError) as missing:
        memory_kube.apply(quota("gpu", "t-acme-dev"))
    assert (missing.value.reason, missing.value.status) == ("NotFound", 404)

    memory_kube.apply(namespace("t-acme-dev"))
    memory_kube.apply(quota("gpu", "t-acme-dev"))
    assert memory_kube.delete("v1", "Namespace", "t-acme-dev") is True

    assert memory_kube.get("v1", "ResourceQuota", "gpu", "t-acme-dev") is None
    assert memory_kube.delete("v1", "Namespace", "t-acme-dev") is False


def test_list_filters_by_namespace_and_label_selector(memory_kube: InMemoryKube) -> None:
    for ns in ("t-a", "t-b"):
        memory_kube.apply(namespace(ns))
    memory_kube.apply(quota("q1", "t-a", tenant="a"))
    memory_kube.apply(quota("q2", "t-b", tenant="b"))
    memory_kube.apply(quota("q3", "t-b", tenant="a"))

    def names(items: list[dict[str, Any]]) -> list[str]:
        return [item["metadata"]["name"] for item in items]

    assert names(memory_kube.list("v1", "ResourceQuota")) == ["q1", "q2", "q3"]
    assert names(memory_kube.list("v1", "ResourceQuota", "t-b")) == ["q2", "q3"]
    assert names(memory_kube.list("v1", "ResourceQuota", label_selector={"tenant": "a"})) == [
        "q1", "q3",
    ]


def service_account_with_secret(kube: InMemoryKube, ns: str = "default") -> None:
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "alice-view", "namespace": ns}})
    kube.apply({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "grant-1", "namespace": ns}})


def test_bound_token_dies_with_its_secret_only(memory_kube: InMemoryKube) -> None:
    service_account_with_secret(memory_kube)
    memory_kube.apply({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "grant-2", "namespace": "default"}})
    first = memory_kube.request_token("default", "alice-view", expiration_seconds=3600,
                                      bound_secret="grant-1")
    second = memory_kube.request_token("default", "alice-view", expiration_seconds=3600,
                                       bound_secret="grant-2")

    memory_kube.delete("v1", "Secret", "grant-1", "default")

    assert first.count(".") == 2 and first != second
    assert not memory_kube.token_valid(first)
    assert memory_kube.token_valid(second)
    assert memory_kube.tokens[1].bound_secret == "grant-2"
    memory_kube.delete("v1", "ServiceAccount", "alice-view", "default")
    assert not memory_kube.token_valid(second)


def test_token_request_validates_expiry_and_existence(memory_kube: InMemoryKube) -> None:
    with pytest.raises(ValueError, match="600"):
        memory_kube.request_token("default", "alice-view", expiration_seconds=599,
                                  bound_secret=None)
    with pytest.raises(PermanentKubeError, match="serviceaccounts"):
        memory_kube.request_token("default", "alice-view", expiration_seconds=600,
                                  bound_secret=None)
    service_account_with_secret(memory_kube)
    with pytest.raises(PermanentKubeError, match="secrets"):
        memory_kube.request_token("default", "alice-view", expiration_seconds=600,
                                  bound_secret="gone")


def test_injected_fault_hits_only_the_chosen_call_then_clears(memory_kube: InMemoryKube) -> None:
    memory_kube.inject("apply", TransientKubeError(delay_seconds=2.0), after=1)

    memory_kube.apply(namespace("t-a"))
    with pytest.raises(TransientKubeError) as failure:
        memory_kube.apply(namespace("t-b"))
    memory_kube.apply(namespace("t-b"))

    assert failure.value.delay_seconds == 2.0
    assert memory_kube.get("v1", "Namespace", "t-b") is not None


def test_injected_fault_can_match_a_kind_and_repeat(memory_kube: InMemoryKube) -> None:
    def is_queue(call: KubeCall) -> bool:
        return call.kind == "Queue"

    memory_kube.inject("*", PermanentKubeError("denied", reason="Forbidden"), times=2,
                       match=is_queue)
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "acme"}}

    memory_kube.apply(namespace("t-a"))
    with pytest.raises(PermanentKubeError, match="denied"):
        memory_kube.apply(queue)
    with pytest.raises(PermanentKubeError, match="denied"):
        memory_kube.get("scheduling.run.ai/v2", "Queue", "acme")
    assert memory_kube.apply(queue)["metadata"]["name"] == "acme"


def test_connection_errors_surface_as_transient(memory_kube: InMemoryKube) -> None:
    memory_kube.inject("list", ConnectionResetError("reset by peer"))

    with pytest.raises(TransientKubeError) as failure:
        memory_kube.list("v1", "Node")

    assert failure.value.reason == "ConnectionError"
    assert isinstance(failure.value.__cause__, ConnectionResetError)


def test_calls_record_method_and_object_identity(memory_kube: InMemoryKube) -> None:
    memory_kube.apply(namespace("t-a"))
    memory_kube.get("v1", "ResourceQuota", "gpu", "t-a")
    memory_kube.delete("v1", "ResourceQuota", "gpu", "t-a")

    assert [(c.method, c.api_version, c.kind, c.name, c.namespace, c.changed)
            for c in memory_kube.calls] == [
        ("apply", "v1", "Namespace", "t-a", None, True),
        ("get", "v1", "ResourceQuota", "gpu", "t-a", False),
        ("delete", "v1", "ResourceQuota", "gpu", "t-a", False),
    ]


def test_unknown_kind_and_missing_namespace_are_programming_errors(
    memory_kube: InMemoryKube,
) -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        memory_kube.get("example.com/v1", "Widget", "w")
    with pytest.raises(ValueError, match="namespace"):
        memory_kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})
