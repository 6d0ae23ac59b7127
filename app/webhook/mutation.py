"""What the admission webhook answers: AdmissionReview v1 in, AdmissionReview v1 out.

Pods that vCluster syncs into a shared-pool namespace leave with ``schedulerName: kai-scheduler``
and the namespace's leaf queue in ``kai.scheduler/queue``. A pod naming another queue or another
scheduler is refused rather than silently moved. Its optional configMap volumes leave as the
equivalent projected volumes, which KAI v0.12 does not wait for.

Pods synced into a hardened namespace (label ``gpu-tenant-portal/hardening``) leave with the
``RuntimeDefault`` seccomp profile unless they name one, and at level ``user-namespaces`` (a
template with user namespaces) with ``hostUsers: false``; one asking for an ``Unconfined``
profile, or there for ``hostUsers: true``, is refused. Both fields are immutable, so they are
set on CREATE only.

In any of them, a pod reaching for another tenant's nodes (placement.py) is refused.

In a shared-pool namespace a pod asks only for GPUs in the unit its cluster holds them in
(gpu_asks.py), and one asking for a share of one GPU leaves with the sharing ConfigMaps KAI's
binder needs (gpu_sharing.py).

Pure: the namespace's labels are passed in.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from app.kube.manifests import labels as lbl
from app.webhook.gpu_asks import gpu_ask_refusal
from app.webhook.gpu_sharing import NoFractionContainer, sharing_patch
from app.webhook.placement import placement_refusal

Review = dict[str, Any]
Patch = list[dict[str, Any]]
API_VERSION = "admission.k8s.io/v1"
# Empty means "not set": the API server defaults it to default-scheduler before admission.
_REPLACEABLE_SCHEDULERS = frozenset({"", "default-scheduler", lbl.KAI_SCHEDULER_NAME})


class InvalidReview(ValueError):
    """The body is not an AdmissionReview v1 request the webhook can answer."""


def request_of(review: Any) -> dict[str, Any]:
    """The review's request, checked for what the answer needs (uid, operation, the pod)."""
    if not isinstance(review, dict) or review.get("apiVersion") != API_VERSION \
            or review.get("kind") != "AdmissionReview":
        raise InvalidReview("expected an admission.k8s.io/v1 AdmissionReview")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise InvalidReview("the AdmissionReview has no request uid")
    if not isinstance(request.get("object"), dict):
        raise InvalidReview("the AdmissionReview request has no object")
    return request


def review_pod(review: Any, namespace_labels: Mapping[str, str] | None) -> Review:
    """The answer for one pod, given the labels of the pod's namespace (None: not found)."""
    request = request_of(review)
    queue = shared_pool_queue(namespace_labels)
    harden = hardening_level(namespace_labels)
    pod = request["object"]
    if (queue is None and harden is None) or lbl.VCLUSTER_SYNCED_MARKER not in _labels(pod):
        return allowed(request["uid"])
    namespace, operation = str(request.get("namespace") or ""), str(request.get("operation"))
    refusal = ((_refusal(pod, queue, namespace) if queue is not None else None)
               or (_gpu_refusal(request, namespace_labels) if queue is not None else None)
               or (_hardening_refusal(pod, namespace, harden) if harden else None)
               or placement_refusal(pod, namespace_labels, operation))
    if refusal is not None:
        return denied(request["uid"], refusal)
    patch = pod_patch(pod, queue, operation) if queue is not None else []
    if queue is not None:
        # After pod_patch: it may rewrite /spec/volumes, to which this appends.
        patch += sharing_patch(pod, request["uid"], operation)
    if harden is not None:
        patch += hardening_patch(pod, operation, harden)
    return allowed(request["uid"], patch)


def _gpu_refusal(request: Mapping[str, Any],
                 namespace_labels: Mapping[str, str] | None) -> str | None:
    pod, operation = request["object"], str(request.get("operation"))
    old = request.get("oldObject")
    refusal = gpu_ask_refusal(pod, old if isinstance(old, dict) else None, namespace_labels,
                              operation)
    if refusal is None:
        try:
            sharing_patch(pod, request["uid"], operation)
        except NoFractionContainer as error:
            return str(error)
    return refusal


def hardening_level(namespace_labels: Mapping[str, str] | None) -> str | None:
    """``seccomp`` or ``user-namespaces`` for a portal-managed hardened namespace, else None."""
    labels = namespace_labels or {}
    level = labels.get(lbl.HARDENING)
    managed = labels.get(lbl.MANAGED_BY) == lbl.MANAGED_BY_VALUE
    return level if managed and level in lbl.HARDENING_LEVELS else None


def hardening_patch(pod: Mapping[str, Any], operation: str, level: str) -> Patch:
    """A RuntimeDefault seccomp profile where the pod names none; ``hostUsers: false`` at level
    ``user-namespaces``."""
    if operation != "CREATE":
        return []
    spec = pod.get("spec") or {}
    patch: Patch = []
    if level == lbl.HARDENING_USER_NAMESPACES and spec.get("hostUsers") is not False:
        patch.append({"op": "add", "path": "/spec/hostUsers", "value": False})
    security = spec.get("securityContext")
    runtime_default = {"type": "RuntimeDefault"}
    if not security:
        patch.append({"op": "add", "path": "/spec/securityContext",
                      "value": {"seccompProfile": runtime_default}})
    elif not security.get("seccompProfile"):
        patch.append({"op": "add", "path": "/spec/securityContext/seccompProfile",
                      "value": runtime_default})
    return patch


def _hardening_refusal(pod: Mapping[str, Any], namespace: str, level: str) -> str | None:
    spec = pod.get("spec") or {}
    if level == lbl.HARDENING_USER_NAMESPACES and spec.get("hostUsers") is True:
        return (f"pods in namespace {namespace} run in their own user namespace; this pod "
                "sets hostUsers: true")
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    contexts = [spec.get("securityContext") or {},
                *((c.get("securityContext") or {}) for c in containers)]
    if any((c.get("seccompProfile") or {}).get("type") == "Unconfined" for c in contexts):
        return (f"pods in namespace {namespace} run with a seccomp profile; this pod asks "
                "for Unconfined")
    return None


def shared_pool_queue(namespace_labels: Mapping[str, str] | None) -> str | None:
    """The leaf queue of a portal-managed shared-pool namespace; None for any other namespace."""
    labels = namespace_labels or {}
    managed = labels.get(lbl.MANAGED_BY) == lbl.MANAGED_BY_VALUE
    if not managed or labels.get(lbl.PLACEMENT) != "shared-pool":
        return None
    return labels.get(lbl.QUEUE) or None


def pod_patch(pod: Mapping[str, Any], queue: str, operation: str) -> Patch:
    """JSON Patch operations setting the scheduler (on CREATE: it is immutable afterwards) and
    the queue label, each only where it differs; and on CREATE the optional configMap volumes
    KAI would wait for (``optional_config_maps_projected``)."""
    patch: Patch = []
    spec = pod.get("spec") or {}
    if operation == "CREATE" and spec.get("schedulerName") != lbl.KAI_SCHEDULER_NAME:
        patch.append({"op": "add", "path": "/spec/schedulerName",
                      "value": lbl.KAI_SCHEDULER_NAME})
    volumes = optional_config_maps_projected(spec.get("volumes") or [])
    if operation == "CREATE" and volumes != (spec.get("volumes") or []):
        patch.append({"op": "add", "path": "/spec/volumes", "value": volumes})
    labels = (pod.get("metadata") or {}).get("labels")
    if not labels:
        patch.append({"op": "add", "path": "/metadata/labels",
                      "value": {lbl.KAI_QUEUE_LABEL: queue}})
    elif labels.get(lbl.KAI_QUEUE_LABEL) != queue:
        patch.append({"op": "add", "path": f"/metadata/labels/{_pointer(lbl.KAI_QUEUE_LABEL)}",
                      "value": queue})
    return patch


def optional_config_maps_projected(volumes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each ``configMap`` volume marked ``optional`` as the projected volume of that one config
    map, the rest unchanged.

    KAI Scheduler v0.12 holds a pod while any config map its ``configMap`` volumes name is
    missing, ``optional: true`` or not (predicates/config_maps.go; v0.13.0 honours it), so
    vCluster's CoreDNS, which mounts the optional ``coredns-custom``, never started in a
    shared-pool cluster. KAI v0.12 reads only ``configMap`` volumes; the kubelet mounts a
    projected config map with the same files, modes and ``optional`` meaning. Required config
    maps stay as they are: KAI rightly waits for them.
    """
    return [_projected(v) if (v.get("configMap") or {}).get("optional") is True else v
            for v in volumes]


def _projected(volume: Mapping[str, Any]) -> dict[str, Any]:
    source = dict(volume["configMap"])
    projected: dict[str, Any] = {}
    if "defaultMode" in source:
        projected["defaultMode"] = source.pop("defaultMode")
    projected["sources"] = [{"configMap": source}]
    rest = {key: value for key, value in volume.items() if key != "configMap"}
    return {**rest, "projected": projected}


def allowed(uid: str, patch: Patch | None = None) -> Review:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def denied(uid: str, message: str, code: int = 403, reason: str = "Forbidden") -> Review:
    status = {"status": "Failure", "code": code, "reason": reason, "message": message}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": False, "status": status}}


def _refusal(pod: Mapping[str, Any], queue: str, namespace: str) -> str | None:
    named = _labels(pod).get(lbl.KAI_QUEUE_LABEL)
    if named is not None and named != queue:
        return (f"pods in namespace {namespace} run in KAI queue {queue!r}; "
                f"this pod names queue {named!r} in label {lbl.KAI_QUEUE_LABEL}")
    scheduler = (pod.get("spec") or {}).get("schedulerName") or ""
    if scheduler not in _REPLACEABLE_SCHEDULERS:
        return (f"pods in namespace {namespace} are scheduled by {lbl.KAI_SCHEDULER_NAME}; "
                f"this pod asks for scheduler {scheduler!r}")
    return None


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _pointer(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901): ``~`` and ``/`` escaped."""
    return key.replace("~", "~0").replace("/", "~1")
