"""The vcluster.yaml (values of the upstream vCluster chart) for one virtual cluster.

Built from an allowlist: every key below is chosen by the portal and every value comes from a
validated spec or the operator policy, so a tenant cannot loosen what is synced to the host.
Schema: the chart's own values.schema.json, which helm checks on every install and template
validation reads from the chart's repository (chart_schema.py).

Edition (ManifestPolicy.vcluster_edition): on the open-source build the values never use a key of
PRO_ONLY_PATHS. Shared-pool pods then reach the host unchanged and the portal's own mutating
admission webhook sets their scheduler (kai-scheduler) and KAI queue label; on Pro the values
also carry translate patches that set both. Either way the host ValidatingAdmissionPolicy in
admission.py refuses a shared-pool pod without kai-scheduler and its own leaf queue.
"""

import copy
import json
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from app.kube.manifests import labels as lbl
from app.kube.manifests.host import container_limits, quota_lines
from app.kube.manifests.names import cluster_queue_name
from app.kube.manifests.specs import ClusterSpec, ManifestPolicy

Values = dict[str, Any]

# Kinds whose translate patches (sync.<direction>.<kind>.patches) go through pkg/pro/patches.go.
_PATCHED_TO_HOST: Final = (
    "configMaps", "endpoints", "endpointSlices", "ingresses", "namespaces", "networkPolicies",
    "persistentVolumeClaims", "persistentVolumes", "podDisruptionBudgets", "pods",
    "priorityClasses", "secrets", "serviceAccounts", "services", "storageClasses",
    "volumeSnapshotContents", "volumeSnapshots",
)
_PATCHED_FROM_HOST: Final = (
    "configMaps", "csiDrivers", "csiNodes", "csiStorageCapacities", "events", "ingressClasses",
    "nodes", "priorityClasses", "runtimeClasses", "secrets", "storageClasses",
    "volumeSnapshotClasses",
)

# Values the open-source vCluster build refuses, read from loft-sh/vcluster at tag v0.30.0 (the
# pinned chart): a key counts when set to true or a non-empty list/map. Two sources: the stubs in
# pkg/pro/*.go that the OSS build runs, which return pro.NewFeatureError, and
# Config.IsProFeatureEnabled in config/config.go, with which `vcluster create` refuses Pro features
# (marked "+cfg" below). Re-read both when the chart moves: v0.36 adds more (sleep, snapshots...).
PRO_ONLY_PATHS: Final[tuple[str, ...]] = (
    # pkg/pro/patches.go, for any non-empty list; every syncer calls it, the pod syncer
    # (pkg/controllers/resources/pods/syncer.go) on every pod. Not in IsProFeatureEnabled.
    *(f"sync.toHost.{kind}.patches" for kind in _PATCHED_TO_HOST),
    *(f"sync.fromHost.{kind}.patches" for kind in _PATCHED_FROM_HOST),
    # pkg/controllers/resources/pods/scheduling/config.go (licenseapi.HybridScheduling); +cfg.
    "sync.toHost.pods.hybridScheduling.enabled",
    # pkg/pro/namespace_sync.go, via pkg/setup/config/config.go; +cfg.
    "sync.toHost.namespaces.enabled",
    # pkg/pro/controllers.go: the OSS build has no custom resource syncer; +cfg.
    "sync.toHost.customResources",
    "sync.fromHost.customResources",
    # pkg/pro/privatenodes.go; +cfg.
    "privateNodes.enabled",
    # pkg/pro/embedded_etcd.go, via pkg/setup/initialize.go; +cfg.
    "controlPlane.backingStore.etcd.embedded.enabled",
    # pkg/pro/external_database.go, via pkg/k8s/k8s.go; +cfg.
    "controlPlane.backingStore.database.external.enabled",
    # pkg/pro/integrated_coredns.go, via cmd/vcluster/cmd/start.go; +cfg.
    "controlPlane.coredns.embedded",
    # pkg/pro/embedded_kubevip.go, via cmd/vcluster/cmd/start.go. Not in IsProFeatureEnabled.
    "controlPlane.advanced.kubeVip.enabled",
    # Only in IsProFeatureEnabled: the OSS build has no Pro code behind them.
    "controlPlane.hostPathMapper.central",
    "policies.centralAdmission.validatingWebhooks",
    "policies.centralAdmission.mutatingWebhooks",
    "networking.resolveDNS",
    "experimental.denyProxyRequests",
    "external.platform",
)

OSS_IMAGE_REPOSITORY: Final = "loft-sh/vcluster-oss"

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


# Private nodes (r57.md §1, §8): kubelets join the virtual API server with a bootstrap token.
# vcluster start (pkg/k8s/k8s.go) already runs the apiserver with bootstrap-token auth and the
# Node authorizer, the controller-manager's CSR signer on the cluster CA, and kube-scheduler
# under the virtual scheduler; extraArgs replace a base argument of the same --name
# (pkg/util/command/command.go MergeArgs), so always the --flag=value form. Portal constants,
# never template input. The controller list is vCluster's own for the virtual scheduler plus
# tokencleaner (expired bootstrap tokens); nodes unheard of for 40 s are taken for dead (the
# virtual scheduler's default is 1 h).
PRIVATE_NODES_CONTROLLERS: Final = (
    "*,tokencleaner,-nodeipam,-persistentvolume-binder,-attachdetach,"
    "-persistentvolume-expander,-cloud-node-lifecycle,-ttl"
)
_PRIVATE_NODES_DISTRO: Final[Values] = {
    "apiServer": {"extraArgs": ["--enable-admission-plugins=NodeRestriction"]},
    "controllerManager": {"extraArgs": [
        f"--controllers={PRIVATE_NODES_CONTROLLERS}",
        "--node-monitor-grace-period=40s",
        "--node-monitor-period=5s",
    ]},
}
# What the host would otherwise lend a private-nodes cluster: its storage (PVCs provisioned on
# the host, and with them StorageClasses, CSI nodes and drivers synced in). Its own nodes bring
# their own.
_PRIVATE_NODES_FROM_HOST_OFF: Final = ("csiNodes", "csiDrivers", "csiStorageCapacities",
                                       "storageClasses")


def _security() -> Values:
    return {
        "podSecurityContext": copy.deepcopy(_RESTRICTED_POD),
        "containerSecurityContext": copy.deepcopy(_RESTRICTED_CONTAINER),
    }


def _control_plane(spec: ClusterSpec, policy: ManifestPolicy) -> Values:
    # controlPlane.distro.k8s.version is deprecated; the image tag selects the Kubernetes version.
    control_plane: Values = {"distro": {"k8s": {"enabled": True, "image": {"tag": spec.image_tag}}}}
    stateful_set: Values = {}
    if policy.vcluster_edition == "oss":
        # The chart defaults to the Pro image (Pro modules off); its values.yaml names this one
        # as "the pure OSS build".
        stateful_set["image"] = {"repository": OSS_IMAGE_REPOSITORY}
    if spec.placement in ("dedicated-nodes", "private-nodes"):
        control_plane["advanced"] = {"virtualScheduler": {"enabled": True}}
    if spec.placement == "private-nodes":
        control_plane["distro"]["k8s"].update(copy.deepcopy(_PRIVATE_NODES_DISTRO))
    if policy.control_plane_node_selector:
        stateful_set["scheduling"] = {"nodeSelector": dict(policy.control_plane_node_selector)}
    # The certificate names the endpoint tenants use, or kubectl refuses it.
    control_plane["proxy"] = {"extraSANs": [_host_of(spec.endpoint)]}
    if spec.pod_security == "restricted":
        stateful_set["security"] = _security()
        control_plane["coredns"] = {"security": _security()}
        # The init container that copies the Kubernetes binaries takes its own context.
        control_plane["distro"]["k8s"]["securityContext"] = copy.deepcopy(_RESTRICTED_CONTAINER)
    if stateful_set:
        control_plane["statefulSet"] = stateful_set
    return control_plane


def _host_of(url: str) -> str:
    host = urlsplit(url).hostname
    assert host, f"endpoint without a host: {url!r}"  # ClusterSpec checks it is an https URL
    return host


def _node_selector(spec: ClusterSpec) -> dict[str, str]:
    if spec.placement == "dedicated-nodes":
        selector = {lbl.TENANT: spec.tenant}
    elif spec.gpu_class is not None:
        selector = {lbl.POOL: lbl.POOL_SHARED}
    else:
        selector = {}
    if spec.gpu_class is not None:
        selector[lbl.GPU_PRODUCT] = spec.gpu_class
    return selector


def _from_host(spec: ClusterSpec) -> Values:
    """Sync only matching real nodes; vCluster also puts this selector on every synced pod.

    Dedicated: the tenant's nodes (of the cluster's GPU class). Shared pool: the shared pool's
    nodes of the cluster's GPU class (label ``gpu-tenant-portal/pool=shared``, which the worker
    keeps on every GPU node dedicated to nobody), so GPUs granted for one class are never
    consumed on another and no node dedicated to a tenant is ever listed or selected.
    """
    if spec.placement == "private-nodes":
        return _private_from_host(spec)
    selector = _node_selector(spec)
    if not selector:
        return {}
    nodes = {"enabled": True, "clearImageStatus": True, "selector": {"labels": selector}}
    return {"nodes": nodes}


def _private_from_host(spec: ClusterSpec) -> Values:
    """Private nodes: node sync on (the virtual scheduler requires it, config validation.go)
    with a selector no host node carries, so no host node is synced in; the node syncer leaves
    alone the nodes that kubelets registered themselves (they lack its marker label). Host
    storage off."""
    selector = {lbl.PRIVATE_NODES_OF: cluster_queue_name(spec.tenant, spec.name)}
    part: Values = {"nodes": {"enabled": True, "selector": {"labels": selector}}}
    for kind in _PRIVATE_NODES_FROM_HOST_OFF:
        part[kind] = {"enabled": False}
    return part


def _kai_patches(spec: ClusterSpec) -> list[dict[str, str]]:
    """sync.toHost.pods.patches (TranslatePatch: path + JavaScript expression on the host copy).

    Pro only: the OSS build fails every pod sync on a non-empty list (pkg/pro/patches.go).
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


def _to_host(spec: ClusterSpec, policy: ManifestPolicy) -> Values:
    if spec.placement == "private-nodes":
        # No pod of the cluster on the host: the pod syncer is not registered at all
        # (pkg/controllers/resources/register.go), so it never fights the nodes' own kubelets
        # over a pod. Claims are provisioned by the tenant's own storage, not the host's.
        return {"pods": {"enabled": False}, "persistentVolumeClaims": {"enabled": False}}
    if spec.placement == "dedicated-nodes":
        toleration = f"{lbl.TENANT}={spec.tenant}:NoSchedule"
        return {"pods": {"enforceTolerations": [toleration]}}
    if policy.vcluster_edition == "pro":
        return {"pods": {"patches": _kai_patches(spec)}}
    # OSS: the portal's mutating admission webhook sets scheduler and queue on the host.
    return {}


def _sync(spec: ClusterSpec, policy: ManifestPolicy) -> Values:
    parts = {"toHost": _to_host(spec, policy), "fromHost": _from_host(spec)}
    return {direction: part for direction, part in parts.items() if part}


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
        "controlPlane": _control_plane(spec, policy),
        "policies": _policies(spec, policy),
        "exportKubeConfig": {"server": spec.endpoint},
        # No volume snapshots for GPU tenants: the chart's snapshot rules would be rights the
        # worker must hold itself to create the syncer's roles (deploy/kubernetes/base).
        "rbac": {"enableVolumeSnapshotRules": {"enabled": False}},
    }
    sync = _sync(spec, policy)
    if sync:
        values["sync"] = sync
    if spec.placement == "shared-pool":
        # KAI's pod grouper follows owner references; the vCluster Service owner breaks it.
        values["experimental"] = {"syncSettings": {"setOwner": False}}
    return values


# libyaml's emitter when PyYAML has it: the same text, several times faster (the worker renders
# every cluster's values on each pass).
_SafeDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _NoAliasDumper(_SafeDumper):  # type: ignore[misc]
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
