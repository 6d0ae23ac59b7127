"""What a grant of GPUs is counted in: KAI's profile shape, its weight in a queue, and how a
person reads it."""

from __future__ import annotations

from decimal import Decimal

import pytest

from app.kit.gpu_units import (
    SHARE,
    WHOLE_GPUS,
    GrantUnit,
    ProfileRefused,
    gpu_instances,
    hundredths,
    kai_gpus,
    parse_profile,
    profile_of_resource,
    share_text,
    steps,
    words,
)

H100 = "H100 80GB HBM3"
A100 = "A100 SXM4 80GB"


@pytest.mark.parametrize("profile", ["1g.10gb", "3g.40gb", "7g.80gb", "1g.5gb", "2g.100gb"])
def test_a_profile_of_kais_shape_is_accepted(profile: str) -> None:
    assert parse_profile(profile) == profile
    assert GrantUnit("mig", profile).profile == profile


@pytest.mark.parametrize(("profile", "said"), [
    ("1g.10gb+me", "extra engines (+me)"),
    ("8g.80gb", "1 to 7 GPU instances"),
    ("0g.10gb", "1 to 7 GPU instances"),
    ("1g.1000gb", "must read like 1g.10gb"),
    ("1g.10GB", "must read like 1g.10gb"),
    ("nvidia.com/mig-1g.10gb", "without 'nvidia.com/mig-'"),
    ("", "must read like 1g.10gb"),
])
def test_a_profile_kai_cannot_count_is_refused_in_words(profile: str, said: str) -> None:
    with pytest.raises(ProfileRefused) as refused:
        parse_profile(profile)
    assert said in str(refused.value)
    with pytest.raises(ProfileRefused):
        GrantUnit("mig", profile)


def test_only_mig_has_a_profile_and_the_kinds_are_three() -> None:
    with pytest.raises(ValueError, match="only MIG slices have a profile"):
        GrantUnit("gpu", "1g.10gb")
    with pytest.raises(ValueError, match="unknown GPU unit"):
        GrantUnit("cpu")  # type: ignore[arg-type]
    assert GrantUnit("gpu", "") == WHOLE_GPUS and SHARE.kind == "share"
    assert WHOLE_GPUS.is_whole and not SHARE.is_whole


def test_the_units_are_values_one_can_key_a_dict_by() -> None:
    assert {GrantUnit("mig", "1g.10gb"): 1}[GrantUnit("mig", "1g.10gb")] == 1
    with pytest.raises(AttributeError):
        SHARE.kind = "gpu"  # type: ignore[misc]


@pytest.mark.parametrize(("unit", "amount", "weight"), [
    (WHOLE_GPUS, 8, Decimal(8)),
    (SHARE, 50, Decimal("0.5")),
    (SHARE, 7, Decimal("0.07")),
    (SHARE, 100, Decimal(1)),
    (GrantUnit("mig", "1g.10gb"), 3, Decimal(3)),
    (GrantUnit("mig", "3g.40gb"), 2, Decimal(6)),
    (GrantUnit("mig", "7g.80gb"), 1, Decimal(7)),
])
def test_kai_weighs_a_slice_as_its_gpu_instances_and_a_share_in_hundredths(
        unit: GrantUnit, amount: int, weight: Decimal) -> None:
    assert kai_gpus(unit, amount) == weight


def test_a_share_is_exact_in_hundredths() -> None:
    assert kai_gpus(SHARE, 7) == Decimal("0.07") and str(kai_gpus(SHARE, 7)) == "0.07"
    assert hundredths(Decimal("0.25")) == 25 and hundredths(Decimal("1")) == 100
    with pytest.raises(ValueError, match="hundredths"):
        hundredths(Decimal("0.125"))
    assert [share_text(n) for n in (50, 25, 7, 100, 120)] == ["0.5", "0.25", "0.07", "1", "1.2"]


def test_the_slices_of_a_node_resource() -> None:
    assert profile_of_resource("nvidia.com/mig-1g.10gb") == "1g.10gb"
    assert profile_of_resource("nvidia.com/mig-1g.10gb+me") is None
    assert profile_of_resource("nvidia.com/gpu") is None
    assert gpu_instances("3g.40gb") == 3


@pytest.mark.parametrize(("unit", "amount", "display", "said"), [
    (WHOLE_GPUS, 8, H100, "8 H100 80GB HBM3 GPUs"),
    (WHOLE_GPUS, 1, H100, "1 H100 80GB HBM3 GPU"),
    (GrantUnit("mig", "1g.10gb"), 2, A100, "2 \u00d7 1g.10gb of A100 SXM4 80GB"),
    (SHARE, 50, H100, "0.5 of an H100 80GB HBM3"),
    (SHARE, 25, "B200", "0.25 of a B200"),
    (SHARE, 25, "L40S", "0.25 of an L40S"),
    (SHARE, 25, "A100 SXM4 80GB", "0.25 of an A100 SXM4 80GB"),
    (SHARE, 25, "Hopper", "0.25 of a Hopper"),
    (SHARE, 25, "Ampere", "0.25 of an Ampere"),
])
def test_a_grant_in_words(unit: GrantUnit, amount: int, display: str, said: str) -> None:
    assert words(unit, amount, display) == said


def test_a_grant_in_its_steps_without_the_class() -> None:
    assert steps(WHOLE_GPUS, 3) == "3 GPUs"
    assert steps(GrantUnit("mig", "1g.10gb"), 3) == "3 \u00d7 1g.10gb"
    assert steps(SHARE, 50) == "0.5 of a GPU"
