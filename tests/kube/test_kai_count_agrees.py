"""The portal's two copies of KAI's count (``app.kube`` imports no domain): what the accounting
and capacity figures weigh a grant as (``app.kit.gpu_units``) is what the host's queues hold
(``app.kube.manifests.units``), for every unit, amount and profile; and both accept the same
MIG profiles, so none that one refuses reaches the other."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.kit import gpu_units as kit
from app.kube.manifests import units as kube

AGREEMENT = settings(max_examples=300, deadline=None, database=None, derandomize=True)
AMOUNTS = st.integers(min_value=0, max_value=100_000)
# KAI's shape, its near misses (an 8th instance, 4 memory digits, extra engines, a trailing
# line break, capitals) and anything at all.
PROFILES = st.one_of(
    st.from_regex(r"[1-7]g\.[0-9]{1,3}gb", fullmatch=True),
    st.from_regex(r"[0-9]{1,2}[gG]\.[0-9]{0,4}[gG][bB](\+me)?\n?", fullmatch=True),
    st.text(max_size=12),
)


def kit_accepts(profile: str) -> bool:
    try:
        kit.parse_profile(profile)
    except kit.ProfileRefused:
        return False
    return True


@AGREEMENT
@given(profile=PROFILES)
@example(profile="1g.10gb\n")
@example(profile="1g.10gb+me")
@example(profile="8g.80gb")
@example(profile="1g.\u0661\u0660gb")  # digits, but not the ASCII ones KAI's Go pattern means
def test_both_accept_the_same_mig_profiles(profile: str) -> None:
    assert kit_accepts(profile) == kube.is_mig_profile(profile), repr(profile)
    if profile in ("1g.10gb\n", "1g.\u0661\u0660gb"):
        assert not kube.is_mig_profile(profile)
    if kube.is_mig_profile(profile):
        assert kit.profile_of_resource(kube.mig_resource(profile)) == profile
        assert kit.gpu_instances(profile) == kube.mig_g_count(profile)


@AGREEMENT
@given(profile=st.from_regex(r"[1-7]g\.[0-9]{1,3}gb", fullmatch=True), amount=AMOUNTS)
def test_a_slice_weighs_the_same_in_both(profile: str, amount: int) -> None:
    assert kit.kai_gpus(kit.GrantUnit("mig", profile), amount) == kube.kai_gpus(
        "mig", amount, profile)


@AGREEMENT
@given(unit=st.sampled_from(kit.UNITS), amount=AMOUNTS, profile=st.sampled_from(
    ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.5gb", "1g.999gb"]))
def test_every_unit_weighs_the_same_in_both(unit: kit.UnitKind, amount: int,
                                            profile: str) -> None:
    profile = profile if unit == "mig" else ""
    ours, queues = kit.kai_gpus(kit.GrantUnit(unit, profile), amount), kube.kai_gpus(
        unit, amount, profile)
    assert ours == queues
    assert kube.kai_number_text(queues) == format(ours.normalize(), "f")


@AGREEMENT
@given(hundredths=st.integers(min_value=0, max_value=1000))
def test_a_share_reads_the_same_in_both(hundredths: int) -> None:
    assert kit.share_text(hundredths) == kube.share_text(hundredths)


def test_the_units_and_constants_are_the_same() -> None:
    assert kit.UNITS == kube.GPU_UNITS
    assert (kit.SHARE_STEPS, kit.MIG_RESOURCE_PREFIX) == (kube.SHARE_STEPS,
                                                          kube.MIG_RESOURCE_PREFIX)
