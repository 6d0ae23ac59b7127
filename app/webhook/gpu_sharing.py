"""What a pod asking for a share of one GPU needs before KAI's binder will bind it.

KAI v0.12's binder binds a ``gpu-fraction`` pod only when the pod names its sharing ConfigMaps
in the annotation ``runai/shared-gpu-configmap``; it then writes them in the pod's namespace
(the GPU it got, its portion) just before the bind. KAI's own admission webhook sets that up,
and only with GPU sharing switched on; the portal's webhook does the same, in the same shape, so
that a shared-pool host needs no more of KAI than its scheduler and binder, and a host that also
runs KAI's admission gets the same names from both:

- the annotation: ``<base>-<7 characters>-shared-gpu``, ``<base>`` the pod's first owner's name
  or else its own, cut so that every name below stays a DNS label; the 7 characters come from a
  hash of the admission request's uid (KAI's are random), so a retried review names the same;
- on the fraction container (``gpu-fraction-container-name``, else the first container): the
  variables ``NVIDIA_VISIBLE_DEVICES``, ``RUNAI_NUM_OF_GPUS`` and ``GPU_PORTION`` from ConfigMap
  ``<prefix>-<index>`` (``<prefix>-i<index>`` for an init container), and every key of
  ``<prefix>-<index>-evar`` as variables;
- a volume ``<prefix>-<index>-vol`` of ConfigMap ``<prefix>-<index>``.

Each is added only where it is missing, so a second review, or KAI's admission after the
portal's, changes nothing. Pods are immutable there: CREATE only. Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from app.kube.manifests import labels as lbl

Patch = list[dict[str, Any]]
_SUFFIX = "shared-gpu"
_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")
# Characters that make no words (as Kubernetes' random names use).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_HASHED = 7
_DNS_LABEL_MAX = 63


class NoFractionContainer(ValueError):
    """The pod names a fraction container it does not have."""


def configmap_prefix(pod: Mapping[str, Any], uid: str, index: int) -> str:
    """``<base>-<7 characters hashed from uid>-shared-gpu``, short enough that
    ``<prefix>-<index>-evar`` and ``<prefix>-<index>-vol`` stay DNS labels."""
    metadata = pod.get("metadata") or {}
    owners = metadata.get("ownerReferences") or []
    base = str((owners[0].get("name") if owners else None) or metadata.get("name")
               or str(metadata.get("generateName") or "").rstrip("-") or "pod")
    room = _DNS_LABEL_MAX - len(_SUFFIX) - (_HASHED + 2) - len("-vol") \
        - (len(str(index)) + 1) - len("-evar")
    # A dot is valid in a pod's name, never in a volume's.
    base = base[:room].replace(".", "-")
    return f"{base}-{_hashed(uid)}-{_SUFFIX}"


def _hashed(uid: str) -> str:
    number = int.from_bytes(hashlib.sha256(uid.encode()).digest(), "big")
    chars = []
    for _ in range(_HASHED):
        number, digit = divmod(number, len(_ALPHABET))
        chars.append(_ALPHABET[digit])
    return "".join(chars)


def fraction_container(pod: Mapping[str, Any]) -> tuple[str, int]:
    """The JSON Pointer key (``initContainers`` or ``containers``) and index of the container
    the share is for."""
    spec = pod.get("spec") or {}
    name = ((pod.get("metadata") or {}).get("annotations") or {}).get(lbl.GPU_FRACTION_CONTAINER)
    if name is None:
        return "containers", 0
    for key in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(key) or []):
            if container.get("name") == name:
                return key, index
    raise NoFractionContainer(f"the annotation {lbl.GPU_FRACTION_CONTAINER} names container "
                              f"{name!r}, which this pod does not have")


def sharing_patch(pod: Mapping[str, Any], uid: str, operation: str) -> Patch:
    """JSON Patch operations giving a ``gpu-fraction`` pod its sharing ConfigMaps."""
    metadata = pod.get("metadata") or {}
    found = metadata.get("annotations") or {}
    spec = pod.get("spec") or {}
    if operation != "CREATE" or lbl.GPU_FRACTION not in found or not spec.get("containers"):
        return []
    key, index = fraction_container(pod)
    patch: Patch = []
    prefix = found.get(lbl.SHARED_GPU_CONFIGMAP)
    if not prefix:
        prefix = configmap_prefix(pod, uid, index)
        # gpu-fraction is an annotation: the map is there.
        patch.append({"op": "add", "value": prefix,
                      "path": f"/metadata/annotations/{_pointer(lbl.SHARED_GPU_CONFIGMAP)}"})
    configmap = f"{prefix}-{'i' if key == 'initContainers' else ''}{index}"
    container = spec[key][index]
    at = f"/spec/{key}/{index}"
    env = _with_variables(container.get("env") or [], configmap)
    if env != (container.get("env") or []):
        patch.append({"op": "add", "path": f"{at}/env", "value": env})
    env_from = container.get("envFrom") or []
    if not any((s.get("configMapRef") or {}).get("name") == f"{configmap}-evar"
               for s in env_from):
        source = {"configMapRef": {"name": f"{configmap}-evar", "optional": False}}
        patch.append({"op": "add", "path": f"{at}/envFrom", "value": [*env_from, source]})
    return patch + _volume_patch(spec.get("volumes"), configmap)


def _with_variables(env: list[dict[str, Any]], configmap: str) -> list[dict[str, Any]]:
    """``env`` with each sharing variable read from ``configmap``; one already read from there
    stays where it is, one set otherwise gives way."""
    wanted = {name: {"name": name, "valueFrom": {"configMapKeyRef": {"name": configmap,
                                                                     "key": name}}}
              for name in _VARIABLES}
    if all(any(_reads(item, name, configmap) for item in env) for name in _VARIABLES):
        return env
    kept = [item for item in env if item.get("name") not in wanted]
    return [*kept, *wanted.values()]


def _reads(item: Mapping[str, Any], name: str, configmap: str) -> bool:
    ref = (item.get("valueFrom") or {}).get("configMapKeyRef") or {}
    return item.get("name") == name and ref.get("name") == configmap and ref.get("key") == name


def _volume_patch(volumes: list[dict[str, Any]] | None, configmap: str) -> Patch:
    volume = {"name": f"{configmap}-vol", "configMap": {"name": configmap}}
    if volumes is None:
        return [{"op": "add", "path": "/spec/volumes", "value": [volume]}]
    for index, existing in enumerate(volumes):
        if existing.get("name") == volume["name"]:
            # The server adds defaults (defaultMode) to the one it has seen.
            mounted = (existing.get("configMap") or {}).get("name")
            return [] if mounted == configmap else [
                {"op": "replace", "path": f"/spec/volumes/{index}", "value": volume}]
    return [{"op": "add", "path": "/spec/volumes/-", "value": volume}]


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
