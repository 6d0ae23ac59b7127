"""Unit conversions: Kubernetes quantities (Mi, m) versus KAI queue units (MB = 10^6 bytes)."""

_MIB = 1024 * 1024
_MB = 1000 * 1000


def mib_to_mb(mib: int) -> int:
    # Round up so a queue's guarantee covers all the memory the namespace quota allows.
    return -(-mib * _MIB // _MB)


def cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(mib: int) -> str:
    return f"{mib}Mi"
