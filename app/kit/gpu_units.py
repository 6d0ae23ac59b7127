"""What a grant of GPUs is counted in: whole GPUs, MIG slices of one profile, or a share of one
GPU in hundredths; how KAI Scheduler weighs each in a queue, and how a person reads it.

- ``gpu``: whole GPUs of a class (``amount`` GPUs).
- ``mig``: ``amount`` slices of one MIG profile such as ``1g.10gb``.
- ``share``: ``amount`` hundredths of one GPU (0.25 is 25): KAI's own fixed point, so a
  fraction never passes through a float in the database or a sum.

KAI counts a slice of ``<g>g.<m>gb`` as ``g`` whole GPUs in a queue, and a profile outside that
shape (``1g.10gb+me``) as nothing at all, so the portal offers only profiles of that shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, get_args

from app.kit.plurals import counted

UnitKind = Literal["gpu", "mig", "share"]
UNITS: tuple[UnitKind, ...] = get_args(UnitKind)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARE_STEPS = 100  # hundredths in one GPU
TIMES = "\u00d7"  # the multiplication sign of "3 \u00d7 1g.10gb"
MAX_PROFILE_LENGTH = 16

# KAI Scheduler's own shape of a MIG profile it can count (g GPU instances, memory in GB).
_PROFILE = re.compile(r"^([1-7])g\.[0-9]{1,3}gb$")
# Letters said with a leading vowel sound: "an H100", "an A100", "an L40S", but "a B200".
_SAID_WITH_A_VOWEL = "AEFHILMNORSX8"


class ProfileRefused(ValueError):
    """A MIG profile the portal cannot offer, with the reason in words."""


def parse_profile(profile: str) -> str:
    """The profile itself when KAI can count it; ``ProfileRefused`` saying why otherwise."""
    if _PROFILE.fullmatch(profile):
        return profile
    if profile.startswith(MIG_RESOURCE_PREFIX):
        raise ProfileRefused(f"name the MIG profile without {MIG_RESOURCE_PREFIX!r}: "
                             f"{profile.removeprefix(MIG_RESOURCE_PREFIX)!r}")
    if "+" in profile:
        raise ProfileRefused(
            f"MIG profile {profile!r} carries extra engines ({profile[profile.index('+'):]}): "
            "KAI Scheduler cannot count such a profile against a queue, so the portal does "
            "not offer it")
    raise ProfileRefused(f"{profile!r} is not a MIG profile KAI Scheduler can count: it must "
                         "read like 1g.10gb (1 to 7 GPU instances, then the memory in GB)")


def profile_of_resource(resource: str) -> str | None:
    """``1g.10gb`` of ``nvidia.com/mig-1g.10gb``; None for another resource or a profile KAI
    cannot count."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
    return profile if _PROFILE.fullmatch(profile) else None


def gpu_instances(profile: str) -> int:
    """The ``g`` of a ``<g>g.<m>gb`` profile: what KAI counts one slice as, in GPUs."""
    found = _PROFILE.fullmatch(profile)
    if found is None:
        raise ProfileRefused(f"{profile!r} is not a MIG profile KAI Scheduler can count")
    return int(found.group(1))


@dataclass(frozen=True)
class GrantUnit:
    """What one step of a grant's ``amount`` is: a whole GPU, a slice of ``profile``, or a
    hundredth of a GPU. ``profile`` is ``""`` but for ``mig``."""

    kind: UnitKind
    profile: str = ""

    def __post_init__(self) -> None:
        if self.kind not in UNITS:
            raise ValueError(f"unknown GPU unit {self.kind!r}: one of {', '.join(UNITS)}")
        if self.kind == "mig":
            parse_profile(self.profile)
        elif self.profile:
            raise ValueError(f"only MIG slices have a profile, not {self.kind!r}")

    @property
    def is_whole(self) -> bool:
        return self.kind == "gpu"


WHOLE_GPUS = GrantUnit("gpu")
SHARE = GrantUnit("share")


def kai_gpus(unit: GrantUnit, amount: int) -> Decimal:
    """What ``amount`` of ``unit`` weighs in a KAI queue's ``gpu`` figures: n whole GPUs, n
    hundredths as n/100, n slices of ``<g>g.<m>gb`` as n times g."""
    if unit.kind == "share":
        return Decimal(amount) / SHARE_STEPS
    if unit.kind == "mig":
        return Decimal(amount * gpu_instances(unit.profile))
    return Decimal(amount)


def share_text(hundredths: int) -> str:
    """A share as people write it: 50 → "0.5", 25 → "0.25", 100 → "1"."""
    value = (Decimal(hundredths) / SHARE_STEPS).normalize()
    return f"{value:f}"


def hundredths(share: Decimal) -> int:
    """A share of one GPU (``Decimal("0.25")``) in hundredths (25); ``ValueError`` when it is
    finer than a hundredth."""
    steps = share * SHARE_STEPS
    if steps != steps.to_integral_value():
        raise ValueError(f"a share is counted in hundredths of a GPU, not {share}")
    return int(steps)


def _article(name: str) -> str:
    first = name[:1]
    word = name.split(" ", 1)[0]
    said_as_letters = word.isupper() or any(c.isdigit() for c in word)
    if said_as_letters:
        return "an" if first.upper() in _SAID_WITH_A_VOWEL else "a"
    return "an" if first.lower() in "aeiou" else "a"


def words(unit: GrantUnit, amount: int, class_display: str) -> str:
    """The grant as a person reads it: "8 H100 80GB HBM3 GPUs", "2 \u00d7 1g.10gb of A100
    SXM4 80GB", "0.5 of an H100 80GB HBM3"."""
    if unit.kind == "mig":
        return f"{amount} {TIMES} {unit.profile} of {class_display}"
    if unit.kind == "share":
        return f"{share_text(amount)} of {_article(class_display)} {class_display}"
    return counted(amount, f"{class_display} GPU")


def steps(unit: GrantUnit, amount: int) -> str:
    """``amount`` in the unit's own steps, without the class: "3 GPUs", "3 \u00d7 1g.10gb",
    "0.5 of a GPU"."""
    if unit.kind == "mig":
        return f"{amount} {TIMES} {unit.profile}"
    if unit.kind == "share":
        return f"{share_text(amount)} of a GPU"
    return counted(amount, "GPU")
