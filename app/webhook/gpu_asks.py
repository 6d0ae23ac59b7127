"""What a synced pod may ask of its cluster's GPUs, by the unit the cluster holds them in.

A shared-pool namespace says its unit in its labels (host.unit_labels); none means whole GPUs.
KAI counts every kind of GPU ask against a queue, but the host ResourceQuota sees only extended
resources, and KAI silently ignores a ``gpu-fraction`` it cannot read (the pod then runs as if
it asked for no GPU). So, in words a tenant can act on:

- a namespace of whole GPUs refuses a share (``gpu-fraction``, ``gpu-memory``) and MIG slices;
- a namespace of MIG slices refuses whole GPUs, shares and slices of another profile, and one
  pod asking for more slices than the cluster holds;
- a namespace of a share refuses whole GPUs and slices, ``gpu-memory`` and
  ``gpu-fraction-num-devices`` (one pod shares one GPU), a fraction that is not a number in
  (0, 1] in steps of 0.01, and one above the cluster's share;
- on UPDATE, ``gpu-fraction`` and ``gpu-memory`` may not change: KAI reads them again on every
  cycle, so a changed one would change what a running pod counts for.

The amount checks apply at creation only: a cluster resized since keeps its running pods.
The tenancy guard (tenancy.py) repeats these rules in CEL. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from app.kube.manifests import labels as lbl
from app.kube.manifests.units import (
    FRACTION_TEXT,
    MIG_RESOURCE_PREFIX,
    SHARE_STEPS,
    kai_number_text,
    mig_resource,
    share_text,
)
from app.kube.quantities import parse_quantity

_FRACTION = re.compile(FRACTION_TEXT)
_SHARE_ASKS = (lbl.GPU_FRACTION, lbl.GPU_MEMORY)
_TIMES = "\u00d7"


@dataclass(frozen=True)
class Holding:
    """What a cluster holds, as its namespace's labels say."""

    unit: str
    gpu_class: str = ""
    mig_profile: str = ""
    slices: int = 0
    share: int = 0  # hundredths of one GPU

    @property
    def class_name(self) -> str:
        """``H100 80GB HBM3`` for the product label NVIDIA-H100-80GB-HBM3."""
        return self.gpu_class.removeprefix("NVIDIA-").replace("-", " ") or "GPU"

    @property
    def one_gpu(self) -> str:
        return f"one {self.class_name}"

    @property
    def words(self) -> str:
        if self.unit == "mig":
            return f"{self.slices} {_TIMES} {self.mig_profile} of {self.class_name}"
        if self.unit == "share":
            return f"{share_text(self.share)} of {self.one_gpu}, shared"
        return "whole GPUs"


def holding(namespace_labels: Mapping[str, str] | None) -> Holding:
    labels = namespace_labels or {}
    unit = labels.get(lbl.GPU_UNIT, "gpu")
    gpu_class = labels.get(lbl.GPU_CLASS, "")
    if unit == "mig":
        return Holding("mig", gpu_class, labels.get(lbl.MIG_PROFILE, ""),
                       slices=_count(labels.get(lbl.MIG_SLICES)))
    if unit == "share":
        return Holding("share", gpu_class, share=_count(labels.get(lbl.GPU_SHARE)))
    return Holding("gpu", gpu_class)


def gpu_ask_refusal(pod: Mapping[str, Any], old_pod: Mapping[str, Any] | None,
                    namespace_labels: Mapping[str, str] | None, operation: str) -> str | None:
    """Why the pod may not ask for what it asks in this namespace; None: it may."""
    held = holding(namespace_labels)
    if operation == "UPDATE" and old_pod is not None:
        changed = _changed_share_ask(pod, old_pod)
        if changed is not None:
            return changed
    if held.unit == "mig":
        return _mig_refusal(pod, held, operation)
    if held.unit == "share":
        return _share_refusal(pod, held, operation)
    return _whole_refusal(pod)


def _whole_refusal(pod: Mapping[str, Any]) -> str | None:
    asks = "this cluster holds whole GPUs: a pod asks for them with nvidia.com/gpu"
    for key in _SHARE_ASKS:
        if key in pod_annotations(pod):
            return f"{asks}; this pod asks for a share of one with the annotation {key}"
    slices = next((name for name in resource_names(pod) if _is_mig(name)), None)
    if slices is not None:
        return f"{asks}; this pod asks for MIG slices ({slices})"
    return None


def _mig_refusal(pod: Mapping[str, Any], held: Holding, operation: str) -> str | None:
    own = mig_resource(held.mig_profile)
    holds = f"this cluster holds {held.words}"
    for key in (*_SHARE_ASKS, lbl.GPU_FRACTION_DEVICES):
        if key in pod_annotations(pod):
            return (f"{holds}; a pod may ask for {own} only; this pod asks for a share of one "
                    f"GPU with the annotation {key}")
    for name in resource_names(pod):
        if name == lbl.GPU_RESOURCE or (_is_mig(name) and name != own):
            return f"{holds}; a pod may ask for {own} only; this pod asks for {name}"
    asked = pod_amount(pod, own)
    if operation == "CREATE" and asked > held.slices:
        return f"{holds}; this pod asks for {kai_number_text(asked)} of them"
    return None


def _share_refusal(pod: Mapping[str, Any], held: Holding, operation: str) -> str | None:
    holds = f"this cluster holds {held.words}: ask with the annotation {lbl.GPU_FRACTION}"
    for name in resource_names(pod):
        if name == lbl.GPU_RESOURCE or _is_mig(name):
            return f"{holds}; this pod asks for {name}"
    found = pod_annotations(pod)
    if lbl.GPU_MEMORY in found:
        return f"{holds}, not {lbl.GPU_MEMORY}"
    if lbl.GPU_FRACTION_DEVICES in found:
        return (f"this cluster holds {held.words}: a pod shares one GPU, so "
                f"{lbl.GPU_FRACTION_DEVICES} is not supported")
    text = found.get(lbl.GPU_FRACTION)
    if text is None:
        return None
    fraction = share_fraction(text)
    if fraction is None:
        return (f"{lbl.GPU_FRACTION} is a number in (0, 1] in steps of 0.01; this pod has "
                f"{lbl.GPU_FRACTION}: {text!r}")
    if operation == "CREATE" and fraction * SHARE_STEPS > held.share:
        return (f"this pod asks {kai_number_text(fraction)} of {held.one_gpu}, the cluster holds "
                f"{share_text(held.share)}")
    return None


def _changed_share_ask(pod: Mapping[str, Any], old_pod: Mapping[str, Any]) -> str | None:
    for key in _SHARE_ASKS:
        before, after = pod_annotations(old_pod).get(key), pod_annotations(pod).get(key)
        if before != after:
            return (f"the annotation {key} of a pod cannot change once it is made ({before!r} "
                    f"to {after!r}): make a new pod")
    return None


def share_fraction(text: str) -> Decimal | None:
    """A ``gpu-fraction`` value in (0, 1] in steps of 0.01; None for any other text."""
    if not isinstance(text, str) or _FRACTION.fullmatch(text) is None:
        return None
    value = Decimal(text)
    return value if value > 0 else None


def pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def containers(pod: Mapping[str, Any]) -> Iterator[tuple[bool, Mapping[str, Any]]]:
    """(is an init container, the container) for each container of the pod."""
    spec = pod.get("spec") or {}
    for init, key in ((True, "initContainers"), (False, "containers")):
        for container in spec.get(key) or []:
            yield init, container


def resource_names(pod: Mapping[str, Any]) -> list[str]:
    """Every resource some container of the pod requests or limits, in order, once."""
    names: dict[str, None] = {}
    for _, container in containers(pod):
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            names.update(dict.fromkeys(resources.get(part) or {}))
    return list(names)


def pod_amount(pod: Mapping[str, Any], resource: str) -> Decimal:
    """How much of ``resource`` the pod holds while it runs: its containers together, or its
    largest init container, whichever is more (as the scheduler counts it)."""
    running, init_peak = Decimal(0), Decimal(0)
    for init, container in containers(pod):
        amount = _container_amount(container, resource)
        if init:
            init_peak = max(init_peak, amount)
        else:
            running += amount
    return max(running, init_peak)


def _container_amount(container: Mapping[str, Any], resource: str) -> Decimal:
    resources = container.get("resources") or {}
    # An extended resource's request defaults to its limit, and may not differ from it.
    value = (resources.get("requests") or {}).get(resource,
                                                  (resources.get("limits") or {}).get(resource))
    try:
        return parse_quantity(value) if value is not None else Decimal(0)
    except ValueError:
        return Decimal(0)  # the API server refuses the pod itself


def _is_mig(name: str) -> bool:
    return name.startswith(MIG_RESOURCE_PREFIX)


def _count(text: str | None) -> int:
    return int(text) if text is not None and text.isdigit() else 0
