"""The vcluster.yaml (values of the upstream vCluster chart) for one virtual cluster.

Built from an allowlist: every key below is chosen by the portal and every value comes from a
validated spec or the operator policy, so a tenant cannot loosen what is synced to the host.
Schema: the chart's values.schema.json (loft-sh/vcluster, chart/values.schema.json, v0.2x).
"""

import copy
import json
from typing import Any

import yaml

from app.kube.manifests import labels as lbl
from app.kube.manifests.host import container_limits, quota_lines
from app.kube.manifests.names import cluster_queue_name
from app.kube.manifests.specs import ClusterSpec, ManifestPolicy

Values = dict[str, Any]

# Pod Security "restricted" for the chart's own pods (control plane, CoreDNS), which would
# otherwise be refused by the namespace's enforce label.
_RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
_RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 12345,
    "runAsGroup": 12345,
}


def _security() -> Values:
    return {
        "podSecurityContext": copy.deepcopy(_RESTRICTED_POD),
        "containerSecurityContext": copy.deepcopy(_RESTRICTED_CONTAINER),
    }


def _control_plane(spec: ClusterSpec) -> Values:
    # controlPlane.distro.k8s.version is deprecated; the image tag selects the Kubernetes version.
    control_plane: Values = {"distro": {"k8s": {"enabled": True, "image": {"tag": spec.image_tag}}}}
    if spec.placement == "dedicated-nodes":
        control_plane["advanced"] = {"virtualScheduler": {"enabled": True}}
    if spec.pod_security == "restricted":
        control_plane["statefulSet"] = {"security": _security()}
        control_plane["coredns"] = {"security": _security()}
    return control_plane


def _node_selector(spec: ClusterSpec) -> dict[str, str]:
    selector = {lbl.TENANT: spec.tenant} if spec.placement == "dedicated-nodes" else {}
    if spec.gpu_class is not None:
        selector[lbl.GPU_PRODUCT] = spec.gpu_class
    return selector


def _from_host(spec: ClusterSpec) -> Values:
    """Sync only matching real nodes; vCluster also puts this selector on every synced pod.

    Dedicated: the tenant's nodes (of the cluster's GPU class). Shared pool: the nodes of the
    cluster's GPU class, so GPUs granted for one class are never consumed on another.
    """
    selector = _node_selector(spec)
    if not selector:
        return {}
    nodes = {"enabled": True, "clearImageStatus": True, "selector": {"labels": selector}}
    return {"nodes": nodes}


def _kai_patches(spec: ClusterSpec) -> list[dict[str, str]]:
    """sync.toHost.pods.patches (TranslatePatch: path + JavaScript expression on the host copy).

    Patches need a vCluster build with the feature enabled (not the OSS image); the host-side
    ValidatingAdmissionPolicy in admission.py refuses non-conforming pods either way.
    """
    queue = json.dumps(cluster_queue_name(spec.tenant, spec.name))
    label = json.dumps(lbl.KAI_QUEUE_LABEL)
    return [
        {"path": "spec.schedulerName", "expression": json.dumps(lbl.KAI_SCHEDULER_NAME)},
        {
            "path": "metadata.labels",
            "expression": f"Object.assign({{}}, value, {{{label}: {queue}}})",
        },
    ]


def _to_host(spec: ClusterSpec) -> Values:
    if spec.placement == "dedicated-nodes":
        toleration = f"{lbl.TENANT}={spec.tenant}:NoSchedule"
        return {"pods": {"enforceTolerations": [toleration]}}
    return {"pods": {"patches": _kai_patches(spec)}}


def _policies(spec: ClusterSpec, policy: ManifestPolicy) -> Values:
    # The chart merges its default quota in (requests.cpu 10, limits.cpu 20, count/pods 20, ...):
    # every line that matters is set here; limits.cpu is deleted (null): the host quota has none.
    quota: dict[str, str | None] = {
        **quota_lines(spec),
        "count/pods": str(spec.pods),
        "limits.cpu": None,
    }
    return {
        "podSecurityStandard": spec.pod_security,
        "resourceQuota": {"enabled": True, "quota": dict(sorted(quota.items()))},
        "limitRange": {"enabled": True, **container_limits(policy)},
        "networkPolicy": {"enabled": True},
    }


def vcluster_values(spec: ClusterSpec, policy: ManifestPolicy) -> Values:
    values: Values = {
        "controlPlane": _control_plane(spec),
        "sync": {"toHost": _to_host(spec)},
        "policies": _policies(spec, policy),
        "exportKubeConfig": {"server": spec.endpoint},
    }
    from_host = _from_host(spec)
    if from_host:
        values["sync"]["fromHost"] = from_host
    if spec.placement == "shared-pool":
        # KAI's pod grouper follows owner references; the vCluster Service owner breaks it.
        values["experimental"] = {"syncSettings": {"setOwner": False}}
    return values


class _NoAliasDumper(yaml.SafeDumper):
    # Anchors and aliases would make the output depend on object identity, not on values.
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any) -> str:
    """Deterministic YAML: sorted keys, block style, no anchors, no line wrapping."""
    return yaml.dump(
        data, Dumper=_NoAliasDumper, sort_keys=True, default_flow_style=False, width=4096
    )


def vcluster_values_yaml(spec: ClusterSpec, policy: ManifestPolicy) -> str:
    return dump_yaml(vcluster_values(spec, policy))
