"""Host objects of clusters holding MIG slices or a share of one GPU: the namespace labels the
guards read, the ResourceQuota lines per unit and KAI's queue numbers (a slice weighs its
profile's g-count), with clusters of whole GPUs left exactly as they were."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from app.kube.manifests import (
    ClusterSpec,
    ManifestPolicy,
    TenantSpec,
    cluster_queue,
    namespace,
    resource_quota,
    tenant_queue,
    vcluster_values,
)
from app.kube.manifests import labels as lbl
from app.kube.manifests.chart_schema import validate_values
from app.kube.manifests.queues import cluster_gpu_limit
from app.kube.manifests.specs import GpuGrant, InvalidSpec
from app.kube.manifests.team_queues import team_queues
from app.kube.manifests.units import kai_gpus, kai_number, mig_g_count, share_text
from app.kube.quantities import drifted
from tests.templates.support import vcluster_values_schema

POLICY = ManifestPolicy()
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
# (unit, profile, amount) -> KAI's count; app.kit.gpu_units.kai_gpus must agree (checked there).
KAI_GPUS_CASES: list[tuple[str, str, int, Decimal]] = [
    ("gpu", "", 8, Decimal(8)),
    ("mig", "1g.10gb", 3, Decimal(3)),
    ("mig", "3g.40gb", 2, Decimal(6)),
    ("mig", "7g.80gb", 1, Decimal(7)),
    ("mig", "2g.20gb", 0, Decimal(0)),
    ("share", "", 50, Decimal("0.5")),
    ("share", "", 7, Decimal("0.07")),
    ("share", "", 100, Decimal(1)),
]


def cluster(unit: str = "gpu", **overrides: Any) -> ClusterSpec:
    fields: dict[str, Any] = {
        "tenant": "acme", "name": "notebooks", "kubernetes_version": "1.32.4",
        "placement": "shared-pool", "gpu_class": H100, "gpus": 4, "cpu_millicores": 8000,
        "memory_mib": 16384, "endpoint": "https://notebooks.acme.vc.example.com"}
    if unit == "mig":
        fields.update(gpu_class=A100, gpus=0, gpu_unit="mig", mig_profile="1g.10gb", amount=3)
    elif unit == "share":
        fields.update(gpus=0, gpu_unit="share", amount=50)
    return ClusterSpec(**{**fields, **overrides})


@pytest.mark.parametrize(("unit", "profile", "amount", "expected"), KAI_GPUS_CASES)
def test_kai_counts_a_slice_as_its_g_count_and_a_share_as_its_fraction(
        unit: str, profile: str, amount: int, expected: Decimal) -> None:
    assert kai_gpus(unit, amount, profile) == expected


@pytest.mark.parametrize("profile", ["1g.10gb+me", "8g.80gb", "0g.5gb", "1g.1000gb", "1g10gb",
                                     "", "1G.10GB"])
def test_a_profile_kai_cannot_count_is_refused(profile: str) -> None:
    with pytest.raises(ValueError, match="MIG profile"):
        mig_g_count(profile)
    with pytest.raises(InvalidSpec, match="MIG profile"):
        cluster("mig", mig_profile=profile)


def test_queue_numbers_are_ints_when_whole_and_exact_hundredths_otherwise() -> None:
    assert kai_number(Decimal("6")) == 6
    assert isinstance(kai_number(Decimal("6.00")), int)
    assert kai_number(Decimal("0.07")) == 0.07
    assert (share_text(50), share_text(100), share_text(7)) == ("0.5", "1", "0.07")


# --- namespace labels -------------------------------------------------------------------


def test_a_cluster_of_whole_gpus_keeps_its_namespace_labels() -> None:
    labels = namespace(cluster(), POLICY)["metadata"]["labels"]
    assert not [key for key in labels if "gpu" in key.split("/", 1)[-1]]


def test_the_namespace_of_slices_and_of_a_share_tells_the_guards_what_it_holds() -> None:
    mig = namespace(cluster("mig"), POLICY)["metadata"]["labels"]
    assert {k: mig[k] for k in (lbl.GPU_UNIT, lbl.MIG_PROFILE, lbl.MIG_SLICES, lbl.GPU_CLASS)} \
        == {lbl.GPU_UNIT: "mig", lbl.MIG_PROFILE: "1g.10gb", lbl.MIG_SLICES: "3",
            lbl.GPU_CLASS: A100}
    assert lbl.GPU_SHARE not in mig
    share = namespace(cluster("share"), POLICY)["metadata"]["labels"]
    assert (share[lbl.GPU_UNIT], share[lbl.GPU_SHARE], share[lbl.GPU_CLASS]) == (
        "share", "50", H100)
    assert lbl.MIG_PROFILE not in share


# --- ResourceQuota lines ----------------------------------------------------------------


def gpu_lines(spec: ClusterSpec) -> dict[str, str]:
    hard = resource_quota(spec)["spec"]["hard"]
    return {key: value for key, value in hard.items() if "nvidia.com" in key}


def test_quota_lines_per_unit() -> None:
    assert gpu_lines(cluster()) == {"requests.nvidia.com/gpu": "4", "limits.nvidia.com/gpu": "4"}
    assert gpu_lines(cluster("mig")) == {
        "requests.nvidia.com/mig-1g.10gb": "3", "limits.nvidia.com/mig-1g.10gb": "3",
        "requests.nvidia.com/gpu": "0", "limits.nvidia.com/gpu": "0"}
    # A fraction asks for no extended resource: KAI's limit is its cap, and no whole GPU.
    assert gpu_lines(cluster("share")) == {"requests.nvidia.com/gpu": "0",
                                           "limits.nvidia.com/gpu": "0"}


def test_an_asleep_cluster_of_slices_may_hold_none() -> None:
    assert gpu_lines(cluster("mig", asleep=True))["requests.nvidia.com/mig-1g.10gb"] == "0"
    assert cluster_queue(cluster("mig", asleep=True), POLICY)["spec"]["resources"]["gpu"] == {
        "quota": 0, "limit": 0, "overQuotaWeight": 1}


@pytest.mark.parametrize("unit", ["gpu", "mig", "share"])
def test_the_charts_quota_has_the_host_quotas_gpu_lines(unit: str) -> None:
    chart = vcluster_values(cluster(unit), POLICY)["policies"]["resourceQuota"]["quota"]
    assert {k: v for k, v in chart.items() if "nvidia.com" in k} == gpu_lines(cluster(unit))


@pytest.mark.parametrize("unit", ["mig", "share"])
def test_the_values_of_slices_and_shares_are_valid_for_the_pinned_chart(unit: str) -> None:
    assert validate_values(vcluster_values(cluster(unit), POLICY), vcluster_values_schema()) == []


# --- KAI queues -------------------------------------------------------------------------


def leaf_gpu(spec: ClusterSpec) -> dict[str, Any]:
    gpu: dict[str, Any] = cluster_queue(spec, POLICY)["spec"]["resources"]["gpu"]
    return gpu


def test_a_leaf_queue_holds_kais_count_and_slices_and_shares_never_burst() -> None:
    assert leaf_gpu(cluster("mig")) == {"quota": 3, "limit": 3, "overQuotaWeight": 1}
    assert leaf_gpu(cluster("mig", mig_profile="3g.40gb", amount=2))["quota"] == 6
    assert leaf_gpu(cluster("share")) == {"quota": 0.5, "limit": 0.5, "overQuotaWeight": 1}
    assert leaf_gpu(cluster("share", amount=7))["limit"] == 0.07
    assert leaf_gpu(cluster()) == {"quota": 4, "limit": 4, "overQuotaWeight": 1}


def acme(**overrides: Any) -> TenantSpec:
    grants = (GpuGrant(A100, "mig", "1g.10gb", 3), GpuGrant(A100, "mig", "3g.40gb", 2),
              GpuGrant(H100, "share", "", 50))
    return replace(TenantSpec("acme", "Acme", {H100: 4}, 64000, 64000, gpu_grants=grants),
                   **overrides)


def test_the_tenant_queue_sums_whole_gpus_g_counts_and_shares_and_bursts_on_top() -> None:
    assert acme().guaranteed_gpus == Decimal("13.5")  # 4 + 3 + 6 + 0.5
    gpu = tenant_queue(acme(), POLICY)["spec"]["resources"]["gpu"]
    assert gpu == {"quota": 13.5, "limit": 13.5, "overQuotaWeight": 1}
    bursting = tenant_queue(acme(burst_gpus=2), POLICY)["spec"]["resources"]["gpu"]
    assert (bursting["quota"], bursting["limit"]) == (13.5, 15.5)
    asleep = acme(asleep_grants=Decimal(3))  # its 3 x 1g.10gb cluster sleeps
    assert tenant_queue(asleep, POLICY)["spec"]["resources"]["gpu"]["quota"] == 10.5
    both = acme(asleep_grants=Decimal(3), asleep_gpus=2)
    assert tenant_queue(both, POLICY)["spec"]["resources"]["gpu"]["quota"] == 8.5


def test_a_cluster_of_whole_gpus_bursts_in_whole_gpus_and_slices_not_at_all() -> None:
    bursting = acme(burst_gpus=2)
    # Its own 4 whole GPUs and the burst: idle slices (KAI's 9.5) lend no whole GPU.
    assert cluster_gpu_limit(bursting, 4, "shared-pool") == 6
    assert cluster_gpu_limit(bursting, 0, "shared-pool", "mig") is None
    assert cluster_gpu_limit(bursting, 0, "shared-pool", "share") is None


def test_team_queues_split_slices_whole_then_count_them() -> None:
    spec = cluster("mig", mig_profile="3g.40gb", amount=3)
    parent, first, second = team_queues(spec, ["alpha", "beta"])
    assert parent["spec"]["resources"]["gpu"]["quota"] == 9
    assert [q["spec"]["resources"]["gpu"]["quota"] for q in (first, second)] == [6, 3]
    assert team_queues(cluster(), ["a"])[1]["spec"]["resources"]["gpu"] == {
        "quota": 4, "limit": 4, "overQuotaWeight": 1}


def test_a_servers_copy_of_a_queue_compares_by_value() -> None:
    queue = cluster_queue(cluster("share", amount=7), POLICY)
    live = {**queue, "spec": {**queue["spec"], "resources": {
        **queue["spec"]["resources"], "gpu": {"quota": "0.070", "limit": 0.07,
                                              "overQuotaWeight": 1.0}}}}
    assert not drifted(live, queue)
    live["spec"]["resources"]["gpu"]["limit"] = 0.08
    assert drifted(live, queue)


# --- what a spec refuses ----------------------------------------------------------------


@pytest.mark.parametrize(("unit", "overrides", "words"), [
    ("mig", {"gpus": 1}, "no whole GPUs"),
    ("share", {"amount": 101}, "at most one GPU"),
    ("mig", {"placement": "dedicated-nodes"}, "shared-pool only"),
    ("share", {"gpu_limit": -1}, "do not burst"),
    ("mig", {"gpu_class": None}, "GPU class"),
    ("share", {"mig_profile": "1g.10gb"}, "only MIG slices"),
    ("share", {"amount": None}, "amount"),
    ("gpu", {"amount": 3}, "amount == gpus"),
    ("gpu", {"gpu_unit": "tpu"}, "unknown GPU unit"),
])
def test_a_spec_the_units_forbid_is_refused(unit: str, overrides: dict[str, Any],
                                            words: str) -> None:
    with pytest.raises(InvalidSpec, match=words):
        cluster(unit, **overrides)


def test_a_cluster_of_whole_gpus_has_amount_gpus_by_default() -> None:
    assert cluster(gpus=6).amount == 6
    with pytest.raises(InvalidSpec, match="MIG profile"):
        GpuGrant(A100, "mig", "1g.10gb+me", 1)
