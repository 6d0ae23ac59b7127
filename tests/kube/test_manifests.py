"""Manifest builders: golden files plus the properties a reviewer checks by hand.

UPDATE_GOLDEN=1 rewrites tests/kube/golden/*.yaml from the current builders.
"""

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import yaml

from app.kube.manifests import (
    ClusterSpec,
    ManifestPolicy,
    TenantSpec,
    cluster_host_objects,
    cluster_queue,
    dump_yaml,
    host_namespace_name,
    kubeconfig_secret_name,
    node_tenant_patch,
    platform_objects,
    release_name,
    resource_quota,
    root_queue,
    tenant_queue,
    vcluster_values,
    vcluster_values_yaml,
)
from app.kube.manifests import labels as lbl
from app.kube.manifests.queues import cluster_gpu_limit
from tests.support.paths import REFERENCE

GOLDEN = Path(__file__).parent / "golden"
KAI_QUEUES = REFERENCE / "kai-queue.yaml"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
H100 = "NVIDIA-H100-80GB-HBM3"
POLICY = ManifestPolicy()
PRO = ManifestPolicy(vcluster_edition="pro")


def acme() -> TenantSpec:
    return TenantSpec("acme", "Acme Research", {H100: 6, "NVIDIA-L40S": 2}, 128000, 1024000)


def train(placement: str = "shared-pool", **overrides: Any) -> ClusterSpec:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "name": "train",
        "kubernetes_version": "1.32.4",
        "placement": placement,
        "gpu_class": H100,
        "gpus": 4,
        "cpu_millicores": 64000,
        "memory_mib": 524288,
        "endpoint": "https://train.acme.vc.example.com",
    }
    return ClusterSpec(**{**fields, **overrides})


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("placement", ["shared-pool", "dedicated-nodes"])
def test_golden_host_objects(placement: str) -> None:
    objects = cluster_host_objects(train(placement), acme(), POLICY)
    check_golden(f"{placement}.objects.yaml", "---\n".join(map(dump_yaml, objects)))


@pytest.mark.parametrize("placement", ["shared-pool", "dedicated-nodes", "private-nodes"])
def test_golden_vcluster_values(placement: str) -> None:
    check_golden(f"{placement}.values.yaml", vcluster_values_yaml(train(placement), POLICY))


def test_golden_pro_shared_pool_values() -> None:
    check_golden("shared-pool.pro.values.yaml", vcluster_values_yaml(train(), PRO))


def test_golden_platform_objects() -> None:
    check_golden("platform.yaml", dump_yaml(platform_objects(POLICY)))


def test_output_is_deterministic_and_pure() -> None:
    first = vcluster_values_yaml(train(), PRO)
    vcluster_values(train(), PRO)["sync"]["toHost"]["pods"]["patches"].clear()
    assert vcluster_values_yaml(train(), PRO) == first
    assert "&id" not in first
    assert "*id" not in first


def test_apply_order_and_common_labels() -> None:
    objects = cluster_host_objects(train(), acme(), POLICY)
    kinds = [o["kind"] for o in objects]
    assert kinds[:5] == [
        "Namespace",
        "ResourceQuota",
        "LimitRange",
        "NetworkPolicy",
        "NetworkPolicy",
    ]
    assert kinds[5:] == ["Queue"] * 3
    for obj in objects:
        assert obj["metadata"]["labels"][lbl.MANAGED_BY] == "gpu-tenant-portal"
    for obj in objects[:5] + objects[-1:]:
        assert obj["metadata"]["labels"][lbl.TENANT] == "acme"
        assert obj["metadata"]["labels"][lbl.CLUSTER] == "train"
    assert {o["metadata"].get("namespace") for o in objects[1:5]} == {"t-acme--train"}


def test_cluster_of_another_tenant_is_refused() -> None:
    with pytest.raises(ValueError, match="does not belong"):
        cluster_host_objects(train(tenant="other"), acme(), POLICY)


# --- names -----------------------------------------------------------------------------


LONG_TENANT = "t" * 10 + "-" + "a" * 19  # 30 chars, the longest slug allowed
LONG_CLUSTER = "c" + "-x" * 31  # 63 chars


@pytest.mark.parametrize(
    ("tenant", "cluster"),
    [("acme", "train"), (LONG_TENANT, LONG_CLUSTER), (LONG_TENANT, "1" * 63), ("a", "9")],
)
def test_names_are_dns_labels(tenant: str, cluster: str) -> None:
    spec = train(tenant=tenant, name=cluster)
    release = release_name(cluster)
    names = [
        host_namespace_name(tenant, cluster),
        release,
        kubeconfig_secret_name(release),
        cluster_queue(spec, POLICY)["metadata"]["name"],
    ]
    for name in names:
        assert len(name) <= 63, name
        assert DNS_LABEL.fullmatch(name), name
    assert len(release) <= 40
    assert release[0].isalpha()


def test_short_names_follow_the_reference() -> None:
    assert host_namespace_name("acme", "train") == "t-acme--train"
    assert release_name("train") == "train"
    assert kubeconfig_secret_name("train") == "vc-train"
    assert cluster_queue(train(), POLICY)["metadata"]["name"] == "acme--train"


def test_shortened_names_stay_unique() -> None:
    a, b = LONG_CLUSTER, LONG_CLUSTER[:-1] + "y"
    assert host_namespace_name(LONG_TENANT, a) != host_namespace_name(LONG_TENANT, b)
    assert release_name(a) != release_name(b)


# --- validation: tenant-supplied strings -----------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"name": "train\nexperimental: {}"},
        {"name": "Train"},
        {"name": "x" * 64},
        {"tenant": "a" * 31},
        {"gpu_class": "H100: {}\nsync"},
        {"kubernetes_version": "1.32.4\ncontrolPlane: {}"},
        {"kubernetes_version": "latest"},
        {"endpoint": "http://train.example.com"},
        {"endpoint": "https://train.example.com\nsync: {}"},
        {"endpoint": "https://x.example.com/?a=b"},
        {"placement": "host-nodes"},
        {"gpus": -1},
        {"gpus": 2, "gpu_class": None},
    ],
)
def test_bad_cluster_input_is_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - any validation message is fine
        train(**overrides)


def test_display_name_stays_a_value() -> None:
    tenant = TenantSpec("acme", "x\nparentQueue: evil\n", {H100: 1}, 1000, 1000)
    text = dump_yaml(tenant_queue(tenant, POLICY))
    parsed = yaml.safe_load(text)
    assert parsed["spec"]["parentQueue"] == "tenants"
    assert parsed["spec"]["displayName"] == "x\nparentQueue: evil\n"


ALLOWED_VALUE_PATHS = {
    "controlPlane.distro.k8s.enabled",
    "controlPlane.distro.k8s.image.tag",
    "controlPlane.distro.k8s.securityContext",
    "controlPlane.advanced.virtualScheduler.enabled",
    "controlPlane.statefulSet.security",
    "controlPlane.statefulSet.image.repository",
    "controlPlane.coredns.security",
    "controlPlane.proxy.extraSANs",
    "controlPlane.statefulSet.scheduling.nodeSelector",
    "sync.fromHost.nodes.enabled",
    "sync.fromHost.nodes.clearImageStatus",
    "sync.fromHost.nodes.selector.labels",
    "sync.toHost.pods.enforceTolerations",
    "sync.toHost.pods.patches",
    "policies.podSecurityStandard",
    "policies.resourceQuota.enabled",
    "policies.resourceQuota.quota",
    "policies.limitRange.enabled",
    "policies.limitRange.default",
    "policies.limitRange.defaultRequest",
    "policies.networkPolicy.enabled",
    "experimental.syncSettings.setOwner",
    "exportKubeConfig.server",
    "rbac.enableVolumeSnapshotRules.enabled",
    "controlPlane.distro.k8s.apiServer.extraArgs",
    "controlPlane.distro.k8s.controllerManager.extraArgs",
    "sync.toHost.pods.enabled",
    "sync.toHost.persistentVolumeClaims.enabled",
    "sync.fromHost.csiNodes.enabled",
    "sync.fromHost.csiDrivers.enabled",
    "sync.fromHost.csiStorageCapacities.enabled",
    "sync.fromHost.storageClasses.enabled",
}


def leaf_paths(values: dict[str, Any], prefix: str = "") -> set[str]:
    paths: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if path in ALLOWED_VALUE_PATHS or not isinstance(value, dict):
            paths.add(path)
        else:
            paths |= leaf_paths(value, f"{path}.")
    return paths


@pytest.mark.parametrize("placement", ["shared-pool", "dedicated-nodes", "private-nodes"])
@pytest.mark.parametrize("pod_security", ["restricted", "baseline"])
@pytest.mark.parametrize("policy", [POLICY, PRO], ids=["oss", "pro"])
def test_values_only_use_allowlisted_keys(
    placement: str, pod_security: str, policy: ManifestPolicy
) -> None:
    values = vcluster_values(train(placement, pod_security=pod_security), policy)
    assert leaf_paths(values) <= ALLOWED_VALUE_PATHS
    assert yaml.safe_load(vcluster_values_yaml(train(placement), policy)) == vcluster_values(
        train(placement), policy
    )


# --- placement semantics ----------------------------------------------------------------


# A shared-pool cluster sees the shared pool's nodes of its class: never a dedicated node.
SHARED_POOL_NODES = {lbl.POOL: lbl.POOL_SHARED, lbl.GPU_PRODUCT: H100}


def test_pro_shared_pool_values_use_kai_and_the_leaf_queue() -> None:
    values = vcluster_values(train(), PRO)
    patches = {p["path"]: p["expression"] for p in values["sync"]["toHost"]["pods"]["patches"]}
    assert patches["spec.schedulerName"] == '"kai-scheduler"'
    assert '{"kai.scheduler/queue": "acme--train"}' in patches["metadata.labels"]
    assert values["experimental"]["syncSettings"]["setOwner"] is False
    assert "virtualScheduler" not in values["controlPlane"].get("advanced", {})
    assert "enforceTolerations" not in values["sync"]["toHost"]["pods"]
    assert values["sync"]["fromHost"]["nodes"]["selector"]["labels"] == SHARED_POOL_NODES


def test_oss_shared_pool_values_leave_pods_to_the_portal_webhook() -> None:
    values = vcluster_values(train(), POLICY)
    assert "toHost" not in values["sync"]  # pkg/pro/patches.go would fail every pod sync
    assert values["sync"]["fromHost"]["nodes"]["selector"]["labels"] == SHARED_POOL_NODES
    assert values["experimental"]["syncSettings"]["setOwner"] is False
    assert "virtualScheduler" not in values["controlPlane"].get("advanced", {})


def test_oss_shared_pool_without_a_gpu_class_syncs_nothing_extra() -> None:
    values = vcluster_values(train(gpu_class=None, gpus=0), POLICY)
    assert "sync" not in values
    assert values["experimental"]["syncSettings"]["setOwner"] is False


def _without_image(values: dict[str, Any]) -> dict[str, Any]:
    values["controlPlane"]["statefulSet"].pop("image", None)
    return values


def test_edition_changes_the_image_and_shared_pool_pods_only() -> None:
    dedicated = train("dedicated-nodes")
    oss_dedicated = vcluster_values(dedicated, POLICY)
    assert oss_dedicated["controlPlane"]["statefulSet"]["image"] == {
        "repository": "loft-sh/vcluster-oss"}
    assert _without_image(vcluster_values(dedicated, PRO)) == _without_image(oss_dedicated)
    oss, pro = vcluster_values(train(), POLICY), vcluster_values(train(), PRO)
    assert "image" not in pro["controlPlane"]["statefulSet"]  # the chart's default, Pro image
    assert pro["sync"].pop("toHost") == {"pods": {"patches": ANY}}
    assert pro == _without_image(oss)


def test_unknown_edition_is_refused() -> None:
    with pytest.raises(ValueError, match="edition"):
        ManifestPolicy(vcluster_edition="enterprise")  # type: ignore[arg-type]


def test_dedicated_nodes_values_select_only_the_tenants_nodes() -> None:
    values = vcluster_values(train("dedicated-nodes"), POLICY)
    nodes = values["sync"]["fromHost"]["nodes"]
    assert nodes["enabled"]
    assert nodes["clearImageStatus"]
    assert nodes["selector"]["labels"] == {lbl.TENANT: "acme", lbl.GPU_PRODUCT: H100}
    assert values["sync"]["toHost"]["pods"] == {
        "enforceTolerations": ["gpu-tenant-portal/tenant=acme:NoSchedule"]
    }
    assert values["controlPlane"]["advanced"]["virtualScheduler"]["enabled"] is True
    assert "experimental" not in values


def test_values_always_carry_policies_version_and_endpoint() -> None:
    for placement in ("shared-pool", "dedicated-nodes"):
        values = vcluster_values(train(placement, kubernetes_version="v1.31.2"), POLICY)
        k8s = values["controlPlane"]["distro"]["k8s"]
        assert (k8s["enabled"], k8s["image"]) == (True, {"tag": "v1.31.2"})
        policies = values["policies"]
        assert policies["resourceQuota"]["enabled"]
        assert policies["limitRange"]["enabled"]
        assert policies["networkPolicy"]["enabled"]
        assert values["exportKubeConfig"]["server"] == "https://train.acme.vc.example.com"


def test_chart_quota_matches_host_quota() -> None:
    host = resource_quota(train())["spec"]["hard"]
    chart = vcluster_values(train(), POLICY)["policies"]["resourceQuota"]["quota"]
    assert chart.pop("count/pods") == host.pop("pods") == "200"
    assert chart.pop("limits.cpu") is None  # deletes the chart default
    assert chart == host


def test_baseline_namespace_still_warns_at_restricted() -> None:
    ns = cluster_host_objects(train(pod_security="baseline"), acme(), POLICY)[0]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "restricted"
    values = vcluster_values(train(pod_security="baseline"), POLICY)
    assert "security" not in values["controlPlane"]["statefulSet"]
    assert "coredns" not in values["controlPlane"]


# --- units ------------------------------------------------------------------------------


def test_quota_units() -> None:
    hard = resource_quota(train(cpu_millicores=1500, memory_mib=1000))["spec"]["hard"]
    assert hard["requests.cpu"] == "1500m"
    assert hard["requests.memory"] == "1000Mi"
    assert hard["requests.nvidia.com/gpu"] == "4"
    assert hard["services.nodeports"] == "0"
    assert hard["services.loadbalancers"] == "0"
    assert all(isinstance(v, str) for v in hard.values())


def test_queue_memory_is_megabytes_not_mebibytes() -> None:
    leaf = cluster_queue(train(memory_mib=524288), POLICY)["spec"]["resources"]
    assert leaf["memory"]["quota"] == 549756  # 512 GiB = 549755.8 MB, rounded up
    assert leaf["cpu"]["quota"] == 64000
    tenant = tenant_queue(acme(), POLICY)["spec"]["resources"]
    assert tenant["memory"]["quota"] == 1024000  # already MB


# --- queues against reference/kai-queue.yaml --------------------------------------------


def shape(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items() if k != "displayName"}
    return type(obj).__name__


@pytest.fixture(scope="module")
def reference_queues() -> list[dict[str, Any]]:
    if not KAI_QUEUES.exists():
        pytest.skip("reference/kai-queue.yaml is not available")
    return list(yaml.safe_load_all(KAI_QUEUES.read_text()))


def test_queues_match_the_reference(reference_queues: list[dict[str, Any]]) -> None:
    ref_root, ref_tenant, ref_leaf = reference_queues
    policy = ManifestPolicy()
    # 8 guaranteed, may borrow 4 more.
    tenant = TenantSpec("acme", "Acme Research", {H100: 8}, 128000, 1024000, burst_gpus=4)
    leaf_spec = train(gpus=4, memory_mib=488281)  # 488281 MiB = 511999.9 MB
    built = [root_queue(policy), tenant_queue(tenant, policy), cluster_queue(leaf_spec, policy)]
    # The reference names the leaf acme-train; the portal joins tenant and cluster with "--",
    # which no slug or cluster name may contain, so that no two tenants' names can meet.
    names = [ref_root["metadata"]["name"], ref_tenant["metadata"]["name"], "acme--train"]
    for ours, ref, name in zip(built, (ref_root, ref_tenant, ref_leaf), names, strict=True):
        assert ours["apiVersion"] == ref["apiVersion"]
        assert ours["kind"] == ref["kind"]
        assert "namespace" not in ours["metadata"]
        assert ours["metadata"]["name"] == name
        assert {**ref["metadata"].get("labels", {}), **lbl.managed()} == ours["metadata"]["labels"]
        assert shape(ours["spec"]) == shape(ref["spec"])
    assert built[0]["spec"] == ref_root["spec"]
    assert built[1]["spec"] == ref_tenant["spec"]
    assert built[2]["spec"]["resources"]["memory"] == ref_leaf["spec"]["resources"]["memory"]
    assert built[2]["spec"]["parentQueue"] == "acme"


def test_queue_limits_are_always_explicit() -> None:
    for queue in (root_queue(POLICY), tenant_queue(acme(), POLICY), cluster_queue(train(), POLICY)):
        for resource in queue["spec"]["resources"].values():
            assert set(resource) == {"quota", "limit", "overQuotaWeight"}


def test_tenant_queue_quota_sums_gpu_classes() -> None:
    gpu = tenant_queue(acme(), POLICY)["spec"]["resources"]["gpu"]
    assert gpu == {"quota": 8, "limit": 8, "overQuotaWeight": 1}


def test_a_bursting_tenant_queue_keeps_its_guarantee_and_raises_its_ceiling() -> None:
    bursting = replace(acme(), burst_gpus=6, over_quota_weight=3)
    assert tenant_queue(bursting, POLICY)["spec"]["resources"]["gpu"] == {
        "quota": 8, "limit": 14, "overQuotaWeight": 3}
    unbounded = replace(acme(), burst_gpus=None)
    assert tenant_queue(unbounded, POLICY)["spec"]["resources"]["gpu"]["limit"] == -1


def test_min_runtimes_are_set_on_the_tenant_queue_only_where_the_tier_sets_them() -> None:
    assert "reclaimMinRuntime" not in tenant_queue(acme(), POLICY)["spec"]
    patient = replace(acme(), reclaim_min_runtime_s=600, preempt_min_runtime_s=60)
    spec = tenant_queue(patient, POLICY)["spec"]
    assert (spec["reclaimMinRuntime"], spec["preemptMinRuntime"]) == ("600s", "60s")


def test_a_shared_pool_cluster_of_a_bursting_tenant_may_hold_up_to_the_tenant_ceiling() -> None:
    bursting = replace(acme(), burst_gpus=6)
    limit = cluster_gpu_limit(bursting, 4, "shared-pool")
    cluster = train(gpus=4, gpu_limit=limit)
    assert cluster_queue(cluster, POLICY)["spec"]["resources"]["gpu"]["quota"] == 4
    assert cluster_queue(cluster, POLICY)["spec"]["resources"]["gpu"]["limit"] == 14
    hard = resource_quota(cluster)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == hard["limits.nvidia.com/gpu"] == "14"
    chart_quota = vcluster_values(cluster, POLICY)["policies"]["resourceQuota"]["quota"]
    assert chart_quota["requests.nvidia.com/gpu"] == "14"


def test_unlimited_burst_leaves_the_gpus_to_kai_and_no_gpu_line_in_the_quotas() -> None:
    limit = cluster_gpu_limit(replace(acme(), burst_gpus=None), 4, "shared-pool")
    cluster = train(gpus=4, gpu_limit=limit)
    assert cluster_queue(cluster, POLICY)["spec"]["resources"]["gpu"]["limit"] == -1
    assert not [k for k in resource_quota(cluster)["spec"]["hard"] if "gpu" in k]
    chart_quota = vcluster_values(cluster, POLICY)["policies"]["resourceQuota"]["quota"]
    assert not [k for k in chart_quota if "gpu" in k]


def test_without_burst_or_on_dedicated_nodes_a_cluster_is_capped_at_its_own_gpus() -> None:
    assert cluster_gpu_limit(acme(), 4, "shared-pool") is None
    assert cluster_gpu_limit(replace(acme(), burst_gpus=None), 8, "dedicated-nodes") is None
    cluster = train(gpus=4)
    assert cluster_queue(cluster, POLICY)["spec"]["resources"]["gpu"]["limit"] == 4
    assert resource_quota(cluster)["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    with pytest.raises(ValueError, match="shared-pool"):
        train("dedicated-nodes", gpu_limit=-1)
    with pytest.raises(ValueError, match="gpu_limit"):
        train(gpus=4, gpu_limit=2)


def test_tenant_named_like_the_root_queue_is_refused() -> None:
    with pytest.raises(ValueError, match="root queue"):
        tenant_queue(TenantSpec("tenants", "T", {}, 0, 0), POLICY)


# --- admission guard --------------------------------------------------------------------


def test_queue_guard_reads_the_namespace_queue_label() -> None:
    _, vap, binding, *_ = platform_objects(POLICY)
    expression = vap["spec"]["validations"][0]["expression"]
    assert "namespaceObject.metadata.labels['gpu-tenant-portal/queue']" in expression
    assert "'kai-scheduler'" in expression
    match = binding["spec"]["matchResources"]
    assert match["namespaceSelector"]["matchLabels"][lbl.PLACEMENT] == "shared-pool"
    ns = cluster_host_objects(train(), acme(), POLICY)[0]
    assert ns["metadata"]["labels"][lbl.QUEUE] == "acme--train"
    assert ns["metadata"]["labels"][lbl.PLACEMENT] == "shared-pool"


# --- nodes ------------------------------------------------------------------------------


OTHER_TAINTS = [
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2025-01-01"},
    {"key": lbl.TENANT, "value": "previous", "effect": "NoSchedule"},
]


def test_node_assignment_keeps_other_taints() -> None:
    patch = node_tenant_patch("h100-r1-n1", "acme", OTHER_TAINTS, resource_version="42")
    assert patch["metadata"] == {
        "name": "h100-r1-n1",
        "labels": {lbl.TENANT: "acme"},
        "resourceVersion": "42",
    }
    assert patch["spec"]["taints"] == [
        OTHER_TAINTS[0],
        {"key": lbl.TENANT, "value": "acme", "effect": "NoSchedule"},
    ]
    assert OTHER_TAINTS[1]["value"] == "previous"  # input not mutated


def test_node_release_drops_only_ours_and_returns_the_node_to_the_pool() -> None:
    patch = node_tenant_patch("h100-r1-n1", None, OTHER_TAINTS)
    assert patch["metadata"] == {"name": "h100-r1-n1", "labels": {lbl.POOL: lbl.POOL_SHARED}}
    assert patch["spec"]["taints"] == [OTHER_TAINTS[0]]


def test_node_patch_refuses_bad_slug() -> None:
    with pytest.raises(ValueError, match="DNS-1123"):
        node_tenant_patch("n", "Acme:NoExecute", [])


def test_two_tenants_never_share_a_host_namespace_or_queue() -> None:
    from app.kube.manifests import cluster_queue_name, host_namespace_name

    assert host_namespace_name("a-b", "c") != host_namespace_name("a", "b-c")
    assert cluster_queue_name("a-b", "c") != cluster_queue_name("a", "b-c")
    assert cluster_queue_name("acme", "train") != "acme-train"  # tenant acme-train's queue


def test_names_with_the_separator_are_refused() -> None:
    with pytest.raises(ValueError, match="--"):
        train(name="a--b")


def test_the_certificate_names_the_endpoint_tenants_reach() -> None:
    values = vcluster_values(train(), POLICY)
    assert values["controlPlane"]["proxy"]["extraSANs"] == ["train.acme.vc.example.com"]


def test_control_planes_go_where_the_operator_puts_them() -> None:
    anywhere = vcluster_values(train(), POLICY)["controlPlane"]["statefulSet"]
    policy = ManifestPolicy(control_plane_node_selector={"node-role.example/control": "true"})
    placed = vcluster_values(train(), policy)["controlPlane"]["statefulSet"]
    assert "scheduling" not in anywhere
    assert placed["scheduling"] == {"nodeSelector": {"node-role.example/control": "true"}}
