"""Deterministic, DNS-1123-safe names for everything the portal creates on the host."""

import hashlib
import re
from typing import Final

DNS_LABEL_MAX: Final = 63
# Helm caps release names at 53; the chart derives longer names from it (vc-<release>,
# <release>-headless, StatefulSet pod and revision names), so leave generous headroom.
RELEASE_MAX: Final = 40
_HASH_LEN: Final = 8
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def is_dns_label(value: str) -> bool:
    return len(value) <= DNS_LABEL_MAX and _DNS_LABEL.fullmatch(value) is not None


def shorten(name: str, max_len: int = DNS_LABEL_MAX) -> str:
    """`name` if it fits, else a prefix plus a hash of the whole name (stable, unique)."""
    if len(name) <= max_len:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_LEN]
    prefix = name[: max_len - _HASH_LEN - 1].rstrip("-")
    return f"{prefix}-{digest}"


# Tenant slugs and cluster names never contain "--" (the portal refuses them), so joining them
# with it keeps every tenant's host names apart: t-a-b--c and t-a--b-c cannot meet.
SEPARATOR: Final = "--"


def host_namespace_name(tenant: str, cluster: str) -> str:
    return shorten(f"t-{tenant}{SEPARATOR}{cluster}")


def release_name(cluster: str) -> str:
    # The chart names a Service after the release, and Service names must start with a letter.
    base = cluster if cluster[:1].isalpha() else f"vc-{cluster}"
    return shorten(base, RELEASE_MAX)


def kubeconfig_secret_name(release: str) -> str:
    return f"vc-{release}"


def tenant_queue_name(tenant: str) -> str:
    return tenant


def cluster_queue_name(tenant: str, cluster: str) -> str:
    return shorten(f"{tenant}{SEPARATOR}{cluster}")
