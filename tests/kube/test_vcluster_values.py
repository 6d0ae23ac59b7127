"""The generated vcluster.yaml against the vCluster chart: its values schema and its edition.

The chart's own values.schema.json, of the pinned version and of a newer one, is read from
../shared/reference, so a chart upgrade shows which values would break. The real chart installs
with these values under the worker's RBAC in tests/reconcilers/clusters/test_helm_real.py.
"""

import json
from typing import Any

import pytest
from jsonschema.protocols import Validator

from app.kit.config import Settings
from app.kube.manifests import ClusterSpec, ManifestPolicy, vcluster_values
from app.kube.manifests.chart_schema import (
    pro_only_paths,
    schema_errors,
    validate_values,
    validator_for,
)
from app.kube.manifests.specs import Placement, PodSecurityLevel
from app.kube.manifests.vcluster import PRO_ONLY_PATHS
from tests.support.paths import REFERENCE
from tests.templates.support import vcluster_values_schema

PINNED = vcluster_values_schema()
NEWER_SCHEMA = REFERENCE / "vcluster-0.36.1-values.schema.json"
OSS = ManifestPolicy()
PRO = ManifestPolicy(vcluster_edition="pro")
EDITIONS = pytest.mark.parametrize("policy", [OSS, PRO], ids=["oss", "pro"])
PLACEMENTS = pytest.mark.parametrize("placement",
                                     ["shared-pool", "dedicated-nodes", "private-nodes"])
POD_SECURITY = pytest.mark.parametrize("pod_security", ["restricted", "baseline"])


def values(
    policy: ManifestPolicy = OSS,
    placement: Placement = "shared-pool",
    pod_security: PodSecurityLevel = "restricted",
) -> dict[str, Any]:
    spec = ClusterSpec(
        tenant="acme", name="train", kubernetes_version="1.32.4", placement=placement,
        gpu_class="NVIDIA-H100-80GB-HBM3", gpus=4, cpu_millicores=64000, memory_mib=524288,
        endpoint="https://train.acme.vc.example.com", pod_security=pod_security,
    )
    return vcluster_values(spec, policy)


# --- the chart's values schema ------------------------------------------------------------


@EDITIONS
@PLACEMENTS
@POD_SECURITY
def test_values_are_valid_for_the_pinned_chart(
    policy: ManifestPolicy, placement: Placement, pod_security: PodSecurityLevel
) -> None:
    generated = values(policy, placement=placement, pod_security=pod_security)
    assert validate_values(generated, PINNED) == []


@pytest.fixture(scope="module")
def newer_chart() -> Validator:
    if not NEWER_SCHEMA.exists():
        pytest.skip(f"{NEWER_SCHEMA.name} is not in ../shared/reference")
    return validator_for(json.loads(NEWER_SCHEMA.read_text(encoding="utf-8")))


@EDITIONS
@PLACEMENTS
@POD_SECURITY
def test_values_are_valid_for_the_newer_chart(
    newer_chart: Validator,
    policy: ManifestPolicy,
    placement: Placement,
    pod_security: PodSecurityLevel,
) -> None:
    generated = values(policy, placement=placement, pod_security=pod_security)
    assert schema_errors(generated, newer_chart) == []


def test_the_reference_schema_is_the_pinned_chart_version() -> None:
    assert (REFERENCE / f"vcluster-{Settings().vcluster_chart_version}-values.schema.json"
            ).is_file()


def test_a_value_of_the_wrong_type_is_reported_with_its_path() -> None:
    broken = values()
    broken["controlPlane"]["distro"]["k8s"]["enabled"] = "yes"
    assert validate_values(broken, PINNED) == [
        "controlPlane.distro.k8s.enabled: 'yes' is not of type 'boolean'"
    ]


def test_a_misspelt_key_is_reported() -> None:
    broken = values()
    broken["policies"]["networkPolicies"] = broken["policies"].pop("networkPolicy")
    errors = validate_values(broken, PINNED)
    assert len(errors) == 1
    assert errors[0].startswith("policies: ")
    assert "'networkPolicies' was unexpected" in errors[0]


def test_an_item_in_a_list_is_named_by_its_index() -> None:
    broken = values(PRO)
    broken["sync"]["toHost"]["pods"]["patches"][1]["path"] = 7
    assert validate_values(broken, PINNED) == [
        "sync.toHost.pods.patches[1].path: 7 is not of type 'string'"
    ]


# --- the edition --------------------------------------------------------------------------


@PLACEMENTS
@POD_SECURITY
def test_oss_values_never_use_a_pro_only_key(
    placement: Placement, pod_security: PodSecurityLevel
) -> None:
    assert pro_only_paths(values(OSS, placement=placement, pod_security=pod_security)) == []


def test_pro_shared_pool_values_use_translate_patches() -> None:
    assert pro_only_paths(values(PRO)) == ["sync.toHost.pods.patches"]


@pytest.mark.parametrize("placement", ["dedicated-nodes", "private-nodes"])
def test_pro_node_placements_need_no_pro_feature(placement: Placement) -> None:
    assert pro_only_paths(values(PRO, placement=placement)) == []


# --- private nodes (r57.md §8; each line confirmed on vcluster start 0.30.0: r57-experiments) --


@EDITIONS
def test_private_nodes_turn_on_what_a_kubelet_joining_the_virtual_api_server_needs(
    policy: ManifestPolicy,
) -> None:
    generated = values(policy, placement="private-nodes")
    k8s = generated["controlPlane"]["distro"]["k8s"]
    assert k8s["apiServer"] == {"extraArgs": ["--enable-admission-plugins=NodeRestriction"]}
    assert k8s["controllerManager"] == {"extraArgs": [
        "--controllers=*,tokencleaner,-nodeipam,-persistentvolume-binder,-attachdetach,"
        "-persistentvolume-expander,-cloud-node-lifecycle,-ttl",
        "--node-monitor-grace-period=40s",
        "--node-monitor-period=5s",
    ]}
    assert generated["controlPlane"]["advanced"] == {"virtualScheduler": {"enabled": True}}
    assert "privateNodes" not in generated


@EDITIONS
def test_private_nodes_keep_pods_and_storage_off_the_host(policy: ManifestPolicy) -> None:
    sync = values(policy, placement="private-nodes")["sync"]
    assert sync["toHost"] == {"pods": {"enabled": False},
                              "persistentVolumeClaims": {"enabled": False}}
    assert sync["fromHost"] == {
        # Node sync on (the virtual scheduler requires it) selecting no host node.
        "nodes": {"enabled": True,
                  "selector": {"labels": {"gpu-tenant-portal/private-nodes-of": "acme--train"}}},
        "csiNodes": {"enabled": False},
        "csiDrivers": {"enabled": False},
        "csiStorageCapacities": {"enabled": False},
        "storageClasses": {"enabled": False},
    }


def test_the_private_nodes_selector_is_a_label_value_for_the_longest_names() -> None:
    spec = ClusterSpec(
        tenant="t" * 30, name="c" * 63, kubernetes_version="1.32.4", placement="private-nodes",
        gpu_class="NVIDIA-L40S", gpus=4, cpu_millicores=1000, memory_mib=1024,
        endpoint="https://c.t.vc.example.com")
    selector = vcluster_values(spec, OSS)["sync"]["fromHost"]["nodes"]["selector"]["labels"]
    (value,) = selector.values()
    assert len(value) <= 63
    assert validate_values(vcluster_values(spec, OSS), PINNED) == []


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"privateNodes": {"enabled": True}}, ["privateNodes.enabled"]),
        ({"privateNodes": {"enabled": False}}, []),
        ({"networking": {"resolveDNS": [{"hostname": "a"}]}}, ["networking.resolveDNS"]),
        ({"networking": {"resolveDNS": []}}, []),
        ({"sync": {"fromHost": {"nodes": {"patches": [{"path": "x"}]}}}},
         ["sync.fromHost.nodes.patches"]),
    ],
)
def test_a_pro_feature_counts_only_when_turned_on(
    extra: dict[str, Any], expected: list[str]
) -> None:
    assert pro_only_paths(extra) == expected


def test_every_pro_only_path_is_a_key_of_the_pinned_chart() -> None:
    # A misspelt path would never match, so the edition check would pass silently.
    assert [path for path in PRO_ONLY_PATHS if not _in_schema(PINNED, path)] == []


def _in_schema(schema: dict[str, Any], path: str) -> bool:
    node: dict[str, Any] = schema
    for key in path.split("."):
        node = _resolve(schema, node).get("properties", {}).get(key)
        if node is None:
            return False
    return True


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
    return node

