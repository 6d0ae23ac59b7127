"""Upserting the host cluster's GPU nodes into the inventory, one listing at a time.

A node missing from a listing is marked gone, never deleted: its history and assignments
stay, and it comes back as the same row if it returns. Appearing, vanishing and returning
nodes and newly seen GPU classes are audited; a mere refresh (last seen, readiness) is not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.gpu_classes import capacity_cache
from app.gpu_classes import repository as gpu_class_repository
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.nodes import repository
from app.nodes.inventory import NodeFacts, display_name
from app.nodes.models import Node

ACTOR = "node-inventory"


@dataclass
class SyncReport:
    seen: int = 0
    added: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    new_classes: list[str] = field(default_factory=list)


def sync_inventory(db: Session, cluster: HostCluster, listed: Iterable[NodeFacts],
                   now: datetime) -> SyncReport:
    report = SyncReport()
    known = repository.nodes_of_host(db, cluster.id)
    classes: dict[str, GpuClass] = {}
    listed_names: set[str] = set()
    for facts in listed:
        listed_names.add(facts.name)
        report.seen += 1
        gpu_class = _class_for(db, facts, classes, report) if facts.product else None
        row = known.get(facts.name)
        if row is None:
            row = Node(host_cluster_id=cluster.id, name=facts.name, first_seen_at=now)
            db.add(row)
            report.added.append(facts.name)
        elif row.gone_at is not None:
            row.gone_at = None
            report.returned.append(facts.name)
        _refresh(row, facts, gpu_class, now)
    for name, row in known.items():
        if name not in listed_names and row.gone_at is None:
            row.gone_at = now
            report.gone.append(name)
    db.flush()
    capacity_cache.forget(db)
    _audit(db, cluster, report)
    return report


def _refresh(row: Node, facts: NodeFacts, gpu_class: GpuClass | None, now: datetime) -> None:
    row.gpu_class_id = gpu_class.id if gpu_class else None
    row.gpu_count = facts.gpus
    row.mig_strategy = facts.mig_strategy
    row.mig_resources = dict(facts.mig_resources)
    row.zone, row.rack, row.clique = facts.zone, facts.rack, facts.clique
    row.ready = facts.ready
    record_observed(row, facts.labels, facts.taints)
    row.last_seen_at = now


def record_observed(row: Node, labels: dict[str, Any], taints: list[dict[str, Any]]) -> None:
    """Labels and taints as last read from (or written to) the host node."""
    row.labels = dict(labels)
    row.taints = [dict(taint) for taint in taints]


def _class_for(db: Session, facts: NodeFacts, cache: dict[str, GpuClass],
               report: SyncReport) -> GpuClass:
    found = cache.get(facts.product) or gpu_class_repository.class_by_product(db, facts.product)
    if found is None:
        found = _new_class(db, facts)
        report.new_classes.append(facts.product)
    elif found.memory_mib == 0 and facts.memory_mib:
        found.memory_mib = facts.memory_mib  # a class declared by hand learns its memory
    if found.gpus_per_node is None and facts.physical_gpus:
        found.gpus_per_node = facts.physical_gpus
    cache[facts.product] = found
    return found


def _new_class(db: Session, facts: NodeFacts) -> GpuClass:
    row = GpuClass(product=facts.product, display_name=display_name(facts.product),
                   memory_mib=facts.memory_mib, gpus_per_node=facts.physical_gpus or None)
    try:
        with db.begin_nested():
            db.add(row)
    except IntegrityError:  # an admin declared it (or another worker saw it) meanwhile
        existing = gpu_class_repository.class_by_product(db, facts.product)
        assert existing is not None
        return existing
    return row


def _audit(db: Session, cluster: HostCluster, report: SyncReport) -> None:
    events = [("gpu_class.discover", "gpu_class", name) for name in report.new_classes]
    events += [("node.discover", "node", name) for name in report.added]
    events += [("node.gone", "node", name) for name in report.gone]
    events += [("node.return", "node", name) for name in report.returned]
    for action, target_type, name in events:
        target = name if target_type == "gpu_class" else f"{cluster.name}/{name}"
        label = (f"GPU class {display_name(name)}" if target_type == "gpu_class"
                 else f"node {name} on {cluster.name}")
        audit.record(db, action=action, actor_id=None, actor_label=ACTOR,
                     target_type=target_type, target_id=target, target_label=label,
                     after={"host_cluster": cluster.name, "name": name})
