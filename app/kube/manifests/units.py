"""Unit conversions: Kubernetes quantities (Mi, m) versus KAI queue units (MB = 10^6 bytes),
and a grant's GPUs in KAI's terms.

A cluster holds GPUs in one of three units: ``gpu`` (whole GPUs), ``mig`` (slices of one MIG
profile) or ``share`` (hundredths of one GPU, KAI's own fixed point). A KAI queue has a single
``gpu`` number, in which KAI v0.12 counts a slice of profile ``<g>g.<m>gb`` as ``g`` whole GPUs
(its resource_info ``GetSumGPUs``), not as the fraction of a GPU it is, and a share as its
fraction. The same rule lives in ``app.kit.gpu_units``; a test checks that the two agree
(``app.kube`` imports no domain).
"""

import re
from decimal import Decimal
from typing import Final, Literal

GpuUnit = Literal["gpu", "mig", "share"]
GPU_UNITS: Final = ("gpu", "mig", "share")
# KAI's own pattern: a profile it cannot parse counts as 0 GPUs in its queues.
MIG_PROFILE: Final = re.compile(r"^([1-7])g\.[0-9]{1,3}gb$")
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
# A share is counted in hundredths of one GPU.
SHARE_STEPS: Final = 100
# How a pod's gpu-fraction annotation may be written: a number in (0, 1] in steps of 0.01
# ("0.25", ".5", "1"; "0" and "0.00" match, and are refused for being 0). RE2 and Python alike,
# for the webhook and the tenancy guard's CEL.
FRACTION_TEXT: Final = r"^(0?[.][0-9]{1,2}0*|1([.]0*)?)$"

_MIB = 1024 * 1024
_MB = 1000 * 1000


def mib_to_mb(mib: int) -> int:
    # Round up so a queue's guarantee covers all the memory the namespace quota allows.
    return -(-mib * _MIB // _MB)


def cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(mib: int) -> str:
    return f"{mib}Mi"


def is_mig_profile(profile: str) -> bool:
    return MIG_PROFILE.fullmatch(profile) is not None


def mig_g_count(profile: str) -> int:
    """How many whole GPUs KAI counts one slice of ``profile`` as: the ``g`` of ``<g>g.<m>gb``."""
    match = MIG_PROFILE.fullmatch(profile)
    if match is None:
        raise ValueError(f"not a MIG profile KAI can count: {profile!r}")
    return int(match[1])


def mig_resource(profile: str) -> str:
    """The extended resource of one slice of ``profile`` (mixed strategy)."""
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def kai_gpus(unit: str, amount: int, mig_profile: str = "") -> Decimal:
    """``amount`` in ``unit`` steps as KAI's queues count it: whole GPUs one each, a slice its
    profile's g-count (3 x 1g.10gb → 3, 2 x 3g.40gb → 6), a share its hundredths (50 → 0.5)."""
    if unit == "gpu":
        return Decimal(amount)
    if unit == "mig":
        return Decimal(amount * mig_g_count(mig_profile))
    if unit == "share":
        return Decimal(amount) / SHARE_STEPS
    raise ValueError(f"unknown GPU unit {unit!r}")


def share_text(hundredths: int) -> str:
    """A share as a tenant writes it in ``gpu-fraction``: 50 → "0.5", 100 → "1"."""
    return kai_number_text(Decimal(hundredths) / SHARE_STEPS)


def kai_number(value: Decimal) -> int | float:
    """A queue quantity as the Queue CRD takes it (a JSON number): an int when whole, so whole
    GPUs are written exactly as before; else the float nearest the hundredths."""
    if value == value.to_integral_value():
        return int(value)
    return float(value)


def kai_number_text(value: Decimal) -> str:
    """``value`` without trailing zeros or exponent: 0.50 → "0.5", 3.00 → "3"."""
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")

