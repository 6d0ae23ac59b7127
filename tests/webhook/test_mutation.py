"""What the webhook answers for a pod: the scheduler and queue it gets, or why it is refused."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from app.kube.manifests import labels as lbl
from app.webhook.mutation import InvalidReview, pod_patch, review_pod

QUEUE = "acme--train"
SHARED_POOL = {lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE, lbl.PLACEMENT: "shared-pool",
               lbl.QUEUE: QUEUE}
SYNCED = {lbl.VCLUSTER_SYNCED_MARKER: "train"}


def pod(labels: dict[str, str] | None = None, scheduler: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p-x-default-x-train", "namespace": "t-acme--train"}
    if labels is not None:
        metadata["labels"] = labels
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": operation, "namespace": "t-acme--train",
                        "object": obj}}


def apply_patch(obj: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """A minimal JSON Patch 'add' on objects, as the API server would apply it."""
    response = answer["response"]
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    result: dict[str, Any] = json.loads(json.dumps(obj))
    for op in json.loads(base64.b64decode(response["patch"])):
        assert op["op"] == "add"
        *parents, last = [t.replace("~1", "/").replace("~0", "~")
                          for t in op["path"].split("/")[1:]]
        target = result
        for token in parents:
            target = target[token]
        target[last] = op["value"]
    return result


def admitted(obj: dict[str, Any], operation: str = "CREATE",
             namespace: dict[str, str] | None = SHARED_POOL) -> dict[str, Any]:
    answer = review_pod(review(obj, operation), namespace)
    assert answer["response"]["allowed"] is True and answer["response"]["uid"] == "u-1"
    return apply_patch(obj, answer)


def test_a_synced_pod_gets_kai_and_the_leaf_queue() -> None:
    landed = admitted(pod({**SYNCED, "app": "trainer"}, scheduler="default-scheduler"))
    assert landed["spec"]["schedulerName"] == lbl.KAI_SCHEDULER_NAME
    assert landed["metadata"]["labels"] == {**SYNCED, "app": "trainer",
                                            lbl.KAI_QUEUE_LABEL: QUEUE}


def test_a_pod_already_right_is_admitted_without_a_patch() -> None:
    right = pod({**SYNCED, lbl.KAI_QUEUE_LABEL: QUEUE}, scheduler=lbl.KAI_SCHEDULER_NAME)
    answer = review_pod(review(right), SHARED_POOL)
    assert answer["response"] == {"uid": "u-1", "allowed": True}


def test_the_queue_label_key_is_escaped_in_the_json_pointer() -> None:
    patch = pod_patch(pod(SYNCED, scheduler=lbl.KAI_SCHEDULER_NAME), QUEUE, "CREATE")
    assert patch == [{"op": "add", "path": "/metadata/labels/kai.scheduler~1queue",
                      "value": QUEUE}]


def test_a_pod_without_labels_gets_the_whole_label_map() -> None:
    patch = pod_patch(pod(None), QUEUE, "CREATE")
    assert {"op": "add", "path": "/metadata/labels",
            "value": {lbl.KAI_QUEUE_LABEL: QUEUE}} in patch
    assert apply_patch(pod(None), {"response": {
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(patch).encode()).decode()}})[
        "metadata"]["labels"] == {lbl.KAI_QUEUE_LABEL: QUEUE}


def test_a_pod_naming_another_queue_is_refused() -> None:
    answer = review_pod(review(pod({**SYNCED, lbl.KAI_QUEUE_LABEL: "other--queue"})),
                        SHARED_POOL)
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "other--queue" in response["status"]["message"]
    assert QUEUE in response["status"]["message"]


def test_a_pod_asking_for_a_foreign_scheduler_is_refused() -> None:
    answer = review_pod(review(pod(SYNCED, scheduler="volcano")), SHARED_POOL)
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "volcano" in response["status"]["message"]


def test_an_update_that_dropped_the_queue_label_gets_it_back_without_touching_the_scheduler(
) -> None:
    landed = admitted(pod({**SYNCED, "app": "v2"}, scheduler=lbl.KAI_SCHEDULER_NAME), "UPDATE")
    assert landed["metadata"]["labels"][lbl.KAI_QUEUE_LABEL] == QUEUE
    answer = review_pod(review(pod(SYNCED, scheduler="default-scheduler"), "UPDATE"),
                        SHARED_POOL)
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert all(op["path"] != "/spec/schedulerName" for op in patch)  # immutable after create


@pytest.mark.parametrize("namespace", [
    None,
    {},
    {lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE, lbl.PLACEMENT: "dedicated-nodes", lbl.QUEUE: QUEUE},
    {lbl.PLACEMENT: "shared-pool", lbl.QUEUE: QUEUE},
])
def test_pods_outside_managed_shared_pool_namespaces_are_untouched(
        namespace: dict[str, str] | None) -> None:
    answer = review_pod(review(pod({**SYNCED, lbl.KAI_QUEUE_LABEL: "anything"}, "volcano")),
                        namespace)
    assert answer["response"] == {"uid": "u-1", "allowed": True}


def test_pods_vcluster_did_not_sync_are_untouched() -> None:
    for labels in (None, {"app": "vcluster"}):
        answer = review_pod(review(pod(labels, scheduler="default-scheduler")), SHARED_POOL)
        assert answer["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize("body", [
    [], {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 3}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}},
])
def test_what_is_not_an_admission_review_is_rejected(body: Any) -> None:
    with pytest.raises(InvalidReview):
        review_pod(body, SHARED_POOL)


# ----- runtime hardening (issue 16)

USER_NAMESPACES = {lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE, lbl.PLACEMENT: "dedicated-nodes",
                   lbl.HARDENING: lbl.HARDENING_USER_NAMESPACES}


def test_a_shared_pool_namespace_with_user_namespaces_gets_both_patches() -> None:
    both = {**SHARED_POOL, lbl.HARDENING: lbl.HARDENING_USER_NAMESPACES}
    result = admitted(pod(SYNCED), namespace=both)
    assert result["spec"]["schedulerName"] == lbl.KAI_SCHEDULER_NAME
    assert result["metadata"]["labels"][lbl.KAI_QUEUE_LABEL] == QUEUE
    assert result["spec"]["hostUsers"] is False
    assert result["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}


def test_a_pods_own_seccomp_profile_is_kept_and_updates_are_not_patched() -> None:
    own = pod(SYNCED)
    own["spec"]["securityContext"] = {"runAsNonRoot": True,
                                      "seccompProfile": {"type": "Localhost",
                                                         "localhostProfile": "p.json"}}
    result = admitted(own, namespace=USER_NAMESPACES)
    assert result["spec"]["securityContext"]["seccompProfile"]["type"] == "Localhost"
    assert result["spec"]["hostUsers"] is False
    assert "hostUsers" not in admitted(pod(SYNCED), "UPDATE", USER_NAMESPACES)["spec"]


def test_a_label_the_portal_does_not_manage_hardens_nothing() -> None:
    foreign = {lbl.HARDENING: lbl.HARDENING_USER_NAMESPACES}
    assert "hostUsers" not in admitted(pod(SYNCED), namespace=foreign)["spec"]
    odd = {**USER_NAMESPACES, lbl.HARDENING: "everything"}
    assert "hostUsers" not in admitted(pod(SYNCED), namespace=odd)["spec"]


def test_an_optional_config_map_volume_leaves_as_the_same_projected_volume() -> None:
    """KAI v0.12 waits for every configMap volume's config map, optional or not; vCluster's
    CoreDNS mounts the optional coredns-custom, which nobody creates."""
    obj = pod(SYNCED)
    optional = {"name": "custom", "configMap": {"name": "coredns-custom-x-kube-system-x-train",
                                                "optional": True, "defaultMode": 0o420,
                                                "items": [{"key": "a", "path": "a"}]}}
    required = {"name": "config", "configMap": {"name": "coredns-x-kube-system-x-train"}}
    obj["spec"]["volumes"] = [optional, required, {"name": "tmp", "emptyDir": {}}]
    volumes = admitted(obj)["spec"]["volumes"]
    assert volumes[0] == {"name": "custom", "projected": {"defaultMode": 0o420, "sources": [
        {"configMap": {"name": "coredns-custom-x-kube-system-x-train", "optional": True,
                       "items": [{"key": "a", "path": "a"}]}}]}}
    assert volumes[1:] == obj["spec"]["volumes"][1:]  # KAI rightly waits for a required one
    # Volumes are immutable: the syncer's updates leave them alone.
    assert "volumes" not in json.dumps(pod_patch(obj, QUEUE, "UPDATE"))
    plain = pod(SYNCED)
    plain["spec"]["volumes"] = [required]
    assert admitted(plain)["spec"]["volumes"] == [required]
