"""KAI Scheduler queues inside a dedicated-nodes virtual cluster whose template installs KAI.

A team is an IdP group the tenant maps to a role that may run workloads (admin or member; a
viewer cannot create pods). Inside the virtual cluster there is one parent queue for the cluster
(its GPUs, CPU and memory) and one leaf queue per team, the cluster's resources split evenly
between them (the first teams in name order take the remainder), so the leaves' quotas sum to
the cluster's. Each leaf may borrow up to the whole cluster when the others leave it idle. A
tenant without team groups gets a single leaf, ``<cluster>-default``, with everything.

GPUs are split in the cluster's own unit (whole GPUs, slices, hundredths of a GPU), then each
part converted to KAI's count (units.kai_gpus: a slice counts its profile's g-count), so that no
team gets part of a slice.

Names come from the cluster's name (a DNS label the portal checked) and a DNS-label form of the
group name; the group name itself only goes into ``displayName`` and nowhere else.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any, Final

from app.kube.manifests import labels as lbl
from app.kube.manifests.specs import ClusterSpec
from app.kube.manifests.units import kai_gpus, kai_number, mib_to_mb

Manifest = dict[str, Any]
TEAM_ROLES: Final = ("admin", "member")
DEFAULT_TEAM: Final = "default"
TEAM: Final = "gpu-tenant-portal/team"
_SUFFIX_MAX: Final = 30
_NOT_LABEL = re.compile(r"[^a-z0-9]+")


def teams(groups: Iterable[tuple[str, str]]) -> list[str]:
    """The teams among a tenant's (group name, role) mappings, sorted; never empty."""
    found = sorted({group for group, role in groups if role in TEAM_ROLES})
    return found or [DEFAULT_TEAM]


def team_label(team: str) -> str:
    """A DNS label for a group name; a short hash keeps names apart that the cleanup merged."""
    cleaned = _NOT_LABEL.sub("-", team.lower()).strip("-")[:_SUFFIX_MAX].strip("-")
    if cleaned == team:
        return cleaned
    digest = hashlib.sha256(team.encode()).hexdigest()[:6]
    return f"{cleaned}-{digest}" if cleaned else f"team-{digest}"


def split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` shares that differ by at most one and sum to ``total``."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _resource(quota: Decimal | int, limit: Decimal | int) -> dict[str, int | float]:
    return {"quota": kai_number(Decimal(quota)), "limit": kai_number(Decimal(limit)),
            "overQuotaWeight": 1}


def _queue(name: str, team: str | None, spec: Manifest) -> Manifest:
    labels = lbl.managed(**({TEAM: team_label(team)} if team is not None else {}))
    return {"apiVersion": lbl.KAI_API_VERSION, "kind": "Queue",
            "metadata": {"name": name, "labels": labels}, "spec": spec}


def team_queue_name(cluster: str, team: str) -> str:
    return f"{cluster}-{team_label(team)}"


def team_queues(cluster: ClusterSpec, team_names: Sequence[str]) -> list[Manifest]:
    """The parent queue (first), then one leaf queue per team, for KAI inside the cluster."""
    memory_mb = mib_to_mb(cluster.memory_mib)
    amount = cluster.amount or 0
    gpus = kai_gpus(cluster.gpu_unit, amount, cluster.mig_profile)
    parent = _queue(cluster.name, None, {
        "displayName": f"cluster {cluster.name}",
        "resources": {"gpu": _resource(gpus, gpus),
                      "cpu": _resource(cluster.cpu_millicores, cluster.cpu_millicores),
                      "memory": _resource(memory_mb, memory_mb)}})
    count = len(team_names)
    team_gpus = [kai_gpus(cluster.gpu_unit, part, cluster.mig_profile)
                 for part in split(amount, count)]
    shares = zip(team_names, team_gpus, split(cluster.cpu_millicores, count),
                 split(memory_mb, count), strict=True)
    leaves = [_queue(team_queue_name(cluster.name, team), team, {
        "displayName": team, "parentQueue": cluster.name,
        "resources": {"gpu": _resource(team_gpu, gpus),
                      "cpu": _resource(cpu, cluster.cpu_millicores),
                      "memory": _resource(memory, memory_mb)}})
        for team, team_gpu, cpu, memory in shares]
    return [parent, *leaves]
