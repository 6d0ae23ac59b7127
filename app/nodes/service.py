"""The node inventory as platform admins and tenants see it, and dedicated node assignment.

Dedicated GPUs are part of the tenant's approved quota (``app.accounting.standing``): an
assignment must fit with what its shared-pool clusters hold, and its end must leave its
dedicated-nodes clusters on the host their GPUs. Either moves the shared pool's guarantee to the
tenant, so it fires ``quota_changed`` (its clusters, and so its KAI queues, follow).

Concurrency: an assignment locks the tenant's quota row of the node's class (so that parallel
assignments to one tenant, or a cluster create racing one, cannot together pass its quota),
then inserts the assignment; its end takes the same lock. The
partial unique index ``uq_node_assignments_active_node`` keeps a node with one tenant: of two
parallel assignments of one node, the second insert fails and answers 409. Checks come before
the first write, so a refused assignment leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.accounting import standing as accounting
from app.audit import service as audit
from app.auth.models import User
from app.auth.principal import Principal
from app.authz import ensure_platform_admin, ensure_platform_writer
from app.database.concurrency import insert_or_conflict, lock_row
from app.database.core import utcnow
from app.database.kept import Kept
from app.gpu_classes import capacity_cache
from app.gpu_classes import repository as gpu_class_repository
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.models import GpuClass
from app.hosts import repository as hosts_repository
from app.hosts.models import HostCluster
from app.http.pagination import Page, PageParams
from app.kit.errors import Conflict, NotFound, ValidationFailed
from app.kube.manifests import labels as lbl
from app.kube.manifests.nodes import tenant_taint
from app.nodes import placement, repository
from app.nodes.models import Node, NodeAssignment
from app.nodes.placement import FreeNode
from app.nodes.repository import NodeFilters
from app.nodes.schemas import (
    AssignmentIn,
    AssignmentOut,
    NodeDetail,
    NodeOut,
    SuggestedNode,
    SuggestionIn,
    SuggestionOut,
    TenantNodeOut,
)
from app.quotas import events as quota_events
from app.quotas.models import TenantQuota
from app.tenants.access import tenant_for
from app.tenants.models import Tenant
from app.workqueue import NODES, enqueue

LABELS_CONDITION = "TenantLabelsApplied"


# ----- reading


def host_cluster(db: Session, name: str | None = None) -> HostCluster:
    """The named host cluster, or the default one (PORTAL_KUBECONFIG's)."""
    row = (hosts_repository.host_by_name(db, name) if name
           else hosts_repository.default_host(db))
    if row is None:
        raise NotFound(f"no host cluster {name!r}" if name
                       else "no host cluster yet: the inventory has not synced one")
    return row


NODE_SORTS: dict[str, tuple[InstrumentedAttribute[Any], ...]] = {
    "name": (Node.name,), "rack": (Node.rack, Node.name)}
"""Orders besides the default (by id): each unique within a host cluster, each indexed."""


def list_nodes(db: Session, principal: Principal, filters: NodeFilters, params: PageParams,
               host: str | None = None, sort: str = "id") -> Page[NodeOut]:
    items, cursor = list_node_fields(db, principal, filters, params, host, sort)
    return Page(items=[NodeOut.model_validate(item) for item in items], next_cursor=cursor)


def list_node_fields(db: Session, principal: Principal, filters: NodeFilters,
                     params: PageParams, host: str | None = None,
                     sort: str = "id") -> tuple[list[dict[str, Any]], str | None]:
    """A page of the inventory as ``NodeOut`` fields, filtered and sorted by the database: one
    statement."""
    ensure_platform_admin(principal)
    cluster = hosts_repository.host_ref(db, host or None)
    if cluster is None:
        if host:
            raise NotFound(f"no host cluster {host!r}")
        return [], None
    rows, cursor = repository.node_page(db, cluster.id, filters, params,
                                        NODE_SORTS.get(sort, ()))
    return [node_fields(cluster.name, row) for row in rows], cursor


def nodes_out(db: Session, cluster: HostCluster, rows: Sequence[Node]) -> list[NodeOut]:
    """These nodes as listed, with their classes and tenants read in one statement."""
    if not rows:
        return []
    found = {row.id: row for row in db.execute(repository.node_rows_of([r.id for r in rows]))}
    return [_node_out(cluster, found[row.id]) for row in rows]


def get_node(db: Session, principal: Principal, name: str,
             host: str | None = None) -> NodeDetail:
    ensure_platform_admin(principal)
    cluster = host_cluster(db, host)
    return _detail(db, cluster, _node(db, cluster, name))


def assignment_version(db: Session, principal: Principal, node: str | None = None) -> str:
    """The fingerprint of the fleet's (or one node's) assignment state, for live streams."""
    ensure_platform_admin(principal)
    if node is None:
        cluster = hosts_repository.default_host(db)
        return "none" if cluster is None else repository.assignment_version(db, cluster.id)
    cluster = host_cluster(db)
    return repository.assignment_version(db, cluster.id, _node(db, cluster, node).id)


def tenant_nodes(db: Session, principal: Principal, slug: str,
                 params: PageParams) -> Page[TenantNodeOut]:
    tenant = tenant_for(db, principal, slug)
    rows, cursor = repository.tenant_node_page(db, tenant.id, params)
    items = [TenantNodeOut(name=row.name, gpus=row.gpu_count, ready=row.ready and not row.gone_at,
                           gpu_class=row.product, gpu_class_name=row.display_name)
             for row in rows]
    return Page(items=items, next_cursor=cursor)


def _node(db: Session, cluster: HostCluster, name: str) -> Node:
    row = repository.node_by_name(db, cluster.id, name)
    if row is None:
        raise NotFound(f"no node {name!r} in host cluster {cluster.name!r}")
    return row


def _node_out(cluster: HostCluster, row: Any) -> NodeOut:
    """A node from a row of ``repository.node_page``."""
    return NodeOut.model_validate(node_fields(cluster.name, row))


def node_fields(host_name: str, row: Any) -> dict[str, Any]:
    """``NodeOut``'s fields, from a row of ``repository.node_page``, as plain values.

    Read through the row's mapping: a ``Row``'s attribute costs about 0.2 µs, its mapping's key
    a tenth of that, and a page reads twenty of them for each of its rows."""
    node = row._mapping
    return {
        "name": node["name"], "host_cluster": host_name, "gpu_class": node["product"],
        "gpu_class_display_name": node["display_name"], "gpus": node["gpu_count"],
        "mig_strategy": node["mig_strategy"],
        "mig_resources": {k: int(v) for k, v in node["mig_resources"].items()},
        "zone": node["zone"], "rack": node["rack"], "clique": node["clique"],
        "ready": node["ready"], "taints": list(node["taints"]), "tenant": node["tenant"],
        "assigned_at": node["assigned_at"], "first_seen_at": node["first_seen_at"],
        "last_seen_at": node["last_seen_at"], "gone_at": node["gone_at"],
        "conditions": [labels_condition(node, node["tenant"])],
    }


def labels_condition(node: Mapping[str, Any], tenant_slug: str | None) -> dict[str, Any]:
    """Whether the host node, as the inventory last saw it, carries what the assignment asks
    (``node``: a listed node's columns, with its tenant label as ``tenant_label``): a
    ``Condition``'s fields as plain values (a list builds one per row; the model cost more
    than the rest of the row)."""
    if node["gone_at"] is not None:
        return _condition("Unknown", "NodeGone", "the node is gone from the host cluster",
                          node["gone_at"])
    ours = [t for t in node["taints"] if t.get("key") == lbl.TENANT]
    label = node["tenant_label"]
    if tenant_slug is None:
        in_sync = label is None and not ours
        wanted = "no tenant label or taint"
    else:
        in_sync = label == tenant_slug and ours == [tenant_taint(tenant_slug)]
        wanted = f"the label and NoSchedule taint of tenant {tenant_slug!r}"
    if in_sync:
        return _condition("True", "InSync", f"the node carries {wanted}", node["last_seen_at"])
    return _condition("False", "Pending", f"waiting for the node reconciler to apply {wanted}",
                      node["last_seen_at"])


def _condition(status: str, reason: str, message: str, since: datetime) -> dict[str, Any]:
    """``Condition(...).model_dump()`` of the labels condition, key for key."""
    return {"type": LABELS_CONDITION, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since, "observedGeneration": None}


def _detail(db: Session, cluster: HostCluster, row: Node) -> NodeDetail:
    [out] = nodes_out(db, cluster, [row])
    history = repository.assignment_history(db, row.id)
    emails = _emails(db, {u for a, _ in history for u in (a.assigned_by_id, a.ended_by_id) if u})
    return NodeDetail(**out.model_dump(), assignments=[
        AssignmentOut(tenant=slug, assigned_at=a.created_at, ended_at=a.ended_at,
                      assigned_by=emails.get(a.assigned_by_id or 0),
                      ended_by=emails.get(a.ended_by_id or 0))
        for a, slug in history])


def _emails(db: Session, user_ids: set[int]) -> dict[int, str]:
    if not user_ids:
        return {}
    return dict(db.execute(select(User.id, User.email).where(User.id.in_(user_ids)))
                .all())


# ----- assigning


def assign_node(db: Session, principal: Principal, name: str, payload: AssignmentIn,
                host: str | None = None) -> NodeDetail:
    """Dedicates a node to a tenant; assigning it again to the same tenant changes nothing."""
    ensure_platform_writer(principal)
    cluster = host_cluster(db, host)
    tenant = _tenant(db, principal, payload.tenant)
    row = _node(db, cluster, name)
    _assign(db, principal, cluster, row, tenant)
    return _detail(db, cluster, row)


def assign_nodes(db: Session, principal: Principal, tenant_slug: str, names: Sequence[str],
                 host: str | None = None) -> list[NodeDetail]:
    """Several nodes for one tenant, all or none (an accepted suggestion)."""
    ensure_platform_writer(principal)
    if not names:
        raise ValidationFailed.on_field("nodes", "choose at least one node")
    cluster = host_cluster(db, host)
    tenant = _tenant(db, principal, tenant_slug)
    with db.begin_nested():
        rows = [_node(db, cluster, name) for name in names]
        for row in rows:
            _assign(db, principal, cluster, row, tenant)
    return [_detail(db, cluster, row) for row in rows]


def _tenant(db: Session, principal: Principal, slug: str) -> Tenant:
    try:
        return tenant_for(db, principal, slug)
    except NotFound as error:
        raise ValidationFailed.on_field("tenant", f"there is no tenant {slug!r}") from error


def _assign(db: Session, principal: Principal, cluster: HostCluster, row: Node,
            tenant: Tenant) -> None:
    gpu_class = _assignable_class(db, row)
    quota = _locked_quota(db, tenant, gpu_class, cluster.region)
    current = repository.active_assignment(db, row.id)
    if current is not None:
        if current.tenant_id == tenant.id:
            return
        owner = db.get(Tenant, current.tenant_id)
        raise Conflict(f"node {row.name} is dedicated to {owner.slug if owner else 'a tenant'} "
                       "already; end that assignment first")
    _check_quota(db, row, tenant, gpu_class, quota, cluster.region)
    assignment = NodeAssignment(node_id=row.id, tenant_id=tenant.id,
                                assigned_by_id=principal.user_id)
    insert_or_conflict(db, assignment, Conflict(
        f"node {row.name} was just dedicated to another tenant by a parallel request"))
    capacity_cache.forget(db)
    enqueue(db, NODES, cluster.id)  # the worker labels and taints the node now
    _guarantee_changed(db, tenant.id, gpu_class.id, cluster.region)
    audit.record(db, action="node.assign", actor_id=principal.user_id,
                 actor_label=principal.label, tenant_id=tenant.id, target_type="node",
                 target_id=f"{cluster.name}/{row.name}",
                 target_label=f"node {row.name} on {cluster.name}", before=None,
                 after={"tenant": tenant.slug, "gpu_class": gpu_class.product,
                        "gpus": row.gpu_count})


def _assignable_class(db: Session, row: Node) -> GpuClass:
    if row.gone_at is not None:
        raise Conflict(f"node {row.name} is gone from the host cluster")
    gpu_class = db.get(GpuClass, row.gpu_class_id) if row.gpu_class_id else None
    if gpu_class is None:
        raise Conflict(f"node {row.name} has no GPU class (no nvidia.com/gpu.product label)")
    if row.gpu_count == 0:
        raise Conflict(f"node {row.name} has no whole GPUs (MIG strategy {row.mig_strategy!r}); "
                       "dedicated nodes are counted in whole GPUs against quota")
    return gpu_class


def _locked_quota(db: Session, tenant: Tenant, gpu_class: GpuClass,
                  region: str) -> TenantQuota | None:
    """The tenant's quota of the class in the node's region: dedicated nodes count there."""
    quota = repository.tenant_quota(db, tenant.id, gpu_class.id, region)
    return lock_row(db, TenantQuota, quota.id) if quota is not None else None


def _check_quota(db: Session, row: Node, tenant: Tenant, gpu_class: GpuClass,
                 quota: TenantQuota | None, region: str) -> None:
    """The tenant's standing with the node dedicated: its dedicated GPUs and those its
    shared-pool clusters hold within its approved quota (``app.accounting.standing``)."""
    refusal = accounting.dedication_refusal(
        accounting.standing(db, tenant.id, gpu_class.id, region), row.name, row.gpu_count,
        tenant.slug, gpu_class.display_name, region)
    if refusal is not None:
        raise Conflict(refusal, errors=[
            {"field": "tenant", "message": "not enough approved quota of this class"}])


def end_assignment(db: Session, principal: Principal, name: str,
                   host: str | None = None) -> NodeDetail:
    ensure_platform_writer(principal)
    cluster = host_cluster(db, host)
    row = _node(db, cluster, name)
    current = repository.active_assignment(db, row.id)
    if current is None:
        raise NotFound(f"node {name} is not dedicated to any tenant")
    _check_end(db, cluster, row, current.tenant_id)
    if not repository.end_assignment(db, current.id, principal.user_id, utcnow()):
        raise NotFound(f"node {name} is not dedicated to any tenant")
    capacity_cache.forget(db)
    if row.gpu_class_id is not None:
        _guarantee_changed(db, current.tenant_id, row.gpu_class_id, cluster.region)
    enqueue(db, NODES, cluster.id)  # the worker removes the node's label and taint now
    tenant = db.get(Tenant, current.tenant_id)
    audit.record(db, action="node.unassign", actor_id=principal.user_id,
                 actor_label=principal.label, tenant_id=current.tenant_id, target_type="node",
                 target_id=f"{cluster.name}/{row.name}",
                 target_label=f"node {row.name} on {cluster.name}",
                 before={"tenant": tenant.slug if tenant else None}, after={"tenant": None})
    return _detail(db, cluster, row)


def _guarantee_changed(db: Session, tenant_id: int, gpu_class_id: int, region: str) -> None:
    """Dedicated GPUs are part of the quota: the shared pool's guarantee to the tenant (its KAI
    queue's quota on the region's hosts) moved, and its clusters follow within seconds."""
    quota_events.quota_changed.fire(db, quota_events.QuotaChanged(tenant_id, gpu_class_id,
                                                                  region))


def _check_end(db: Session, cluster: HostCluster, row: Node, tenant_id: int) -> None:
    """Under the tenant's quota row's lock (a dedicated-nodes create takes it first): the
    tenant's dedicated-nodes clusters on the host still fit its nodes there without this one."""
    gpu_class = db.get(GpuClass, row.gpu_class_id) if row.gpu_class_id else None
    tenant = db.get(Tenant, tenant_id)
    if gpu_class is None or tenant is None or row.gone_at is not None:
        return
    _locked_quota(db, tenant, gpu_class, cluster.region)
    on_host, held = repository.dedicated_on_host(db, tenant_id, gpu_class.id, cluster)
    refusal = accounting.end_refusal(row.name, row.gpu_count, on_host, held, tenant.slug,
                                     gpu_class.display_name)
    if refusal is not None:
        raise Conflict(refusal)


# ----- suggesting


def suggest_nodes(db: Session, principal: Principal, payload: SuggestionIn,
                  host: str | None = None) -> SuggestionOut:
    ensure_platform_admin(principal)
    cluster = host_cluster(db, host)
    tenant = _tenant(db, principal, payload.tenant)
    gpu_class = gpu_class_repository.class_by_product(db, payload.gpu_class)
    if gpu_class is None:
        raise ValidationFailed.on_field("gpu_class", f"there is no GPU class {payload.gpu_class!r}")
    free = [FreeNode(*row) for row in repository.free_node_topology(db, cluster.id,
                                                                     gpu_class.id)]
    suggestion = placement.suggest(free, payload.gpus)
    if suggestion is None:
        raise Conflict(
            f"only {sum(n.gpus for n in free)} {gpu_class.display_name} GPUs are on ready, "
            f"unassigned nodes; {payload.gpus} asked",
            errors=[{"field": "gpus", "message": "more than the free dedicated capacity"}])
    return _suggestion_out(db, tenant, gpu_class, payload.gpus, suggestion, cluster.region)


def _suggestion_out(db: Session, tenant: Tenant, gpu_class: GpuClass, asked: int,
                    suggestion: placement.Suggestion, region: str) -> SuggestionOut:
    standing = accounting.standing(db, tenant.id, gpu_class.id, region)
    approved, dedicated = standing.approved, standing.dedicated
    fits = suggestion.gpus <= standing.shared_left
    notes = []
    if suggestion.gpus > asked:
        notes.append(f"whole nodes give {suggestion.gpus} GPUs for the {asked} asked")
    if not fits:
        notes.append(f"{tenant.slug} has {standing.shared_left} GPUs of approved quota left "
                     "for dedicated nodes (its dedicated nodes and shared-pool clusters hold "
                     "the rest): approve more before assigning")
    return SuggestionOut(
        tenant=tenant.slug, gpu_class=gpu_class.product, gpus_requested=asked,
        gpus=suggestion.gpus, racks=suggestion.racks, cliques=suggestion.cliques,
        nodes=[SuggestedNode(name=n.name, gpus=n.gpus, zone=n.zone, rack=n.rack,
                             clique=n.clique) for n in suggestion.nodes],
        quota_gpus=approved, dedicated_gpus=dedicated, quota_left_gpus=standing.shared_left,
        fits_quota=fits, note="; ".join(notes))


def free_nodes_of(db: Session, principal: Principal, product: str,
                  host: str | None = None) -> list[NodeOut]:
    """The nodes an admin may add to a suggestion by hand."""
    ensure_platform_admin(principal)
    cluster = host_cluster(db, host)
    gpu_class = gpu_class_repository.class_by_product(db, product)
    if gpu_class is None:
        return []
    return nodes_out(db, cluster, repository.free_nodes(db, cluster.id, gpu_class.id))


# ----- pickers for the admin pages


def classes_to_suggest(db: Session, principal: Principal) -> list[GpuClass]:
    ensure_platform_admin(principal)
    return gpu_classes.all_classes(db)


# The most tenants the dedicate page's picker offers; beyond, the slug is typed (and checked).
TENANT_CHOICES = 1000


def tenants_to_pick(db: Session, principal: Principal) -> list[tuple[str, str]]:
    """The active tenants the dedicate page offers, by slug: (slug, display name)."""
    ensure_platform_admin(principal)
    rows = db.execute(select(Tenant.slug, Tenant.display_name).where(Tenant.state == "active")
                      .order_by(Tenant.slug).limit(TENANT_CHOICES))
    return [(slug, name) for slug, name in rows]


def fleet_zones(db: Session, principal: Principal) -> list[str]:
    """The zones the fleet's picker offers; tenants and racks are typed in (there are
    thousands), and classes are those of the capacity table. Kept briefly: a zone the worker's
    inventory sync just brought shows within 2 s."""
    ensure_platform_admin(principal)
    return list(_fleet_zones.get(db))


def _default_host_zones(db: Session) -> tuple[str, ...]:
    cluster = hosts_repository.host_ref(db, None)
    return tuple(repository.live_zones(db, cluster.id)) if cluster else ()


_fleet_zones = Kept("fleet_zones", (Node, HostCluster), _default_host_zones)
