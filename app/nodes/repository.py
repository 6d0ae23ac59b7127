"""SQL for host clusters, the node inventory and dedicated node assignments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, CursorResult, Select, bindparam, func, literal, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.accounting import standing as accounting
from app.gpu_classes.models import GpuClass
from app.hosts import repository as hosts_repository
from app.hosts.models import HostCluster
from app.http.pagination import KeysetPage, PageParams
from app.kube.manifests import labels as lbl
from app.nodes.models import Node, NodeAssignment
from app.quotas.models import TenantQuota
from app.tenants.models import Tenant

DEFAULT_HOST_CLUSTER = hosts_repository.DEFAULT_HOST_CLUSTER


@dataclass(frozen=True)
class NodeFilters:
    gpu_class: str | None = None
    zone: str | None = None
    rack: str | None = None
    tenant: str | None = None
    ready: bool | None = None
    include_gone: bool = False


def nodes_of_host(db: Session, host_cluster_id: int) -> dict[str, Node]:
    rows = db.scalars(select(Node).where(Node.host_cluster_id == host_cluster_id))
    return {row.name: row for row in rows}


def node_by_name(db: Session, host_cluster_id: int, name: str) -> Node | None:
    return db.scalar(select(Node).where(Node.host_cluster_id == host_cluster_id,
                                        Node.name == name))


NodeRows = Select[*tuple[Any, ...]]


def _node_rows(host_cluster_id: Any, shape: NodeFilters, values: Any) -> NodeRows:
    """Nodes as listed, with their class and current tenant (a page in one statement), filtered
    as ``shape`` says by ``values`` (bound parameters named as the filters).

    Rows of columns rather than ``Node`` entities: a listing only reads them, and the node's
    labels (dozens per node) are read for the one label it shows.
    """
    query = _with_class_and_tenant().where(Node.host_cluster_id == host_cluster_id)
    if not shape.include_gone:
        query = query.where(Node.gone_at.is_(None))
    if shape.gpu_class:
        query = query.where(GpuClass.product == values.gpu_class)
    if shape.zone:
        query = query.where(Node.zone == values.zone)
    if shape.rack:
        query = query.where(Node.rack == values.rack)
    if shape.ready is not None:
        query = query.where(Node.ready.is_(shape.ready))  # IS TRUE / IS FALSE: not a parameter
    if shape.tenant:
        query = query.where(Node.id.in_(
            select(NodeAssignment.node_id).join(Tenant, Tenant.id == NodeAssignment.tenant_id)
            .where(Tenant.slug == values.tenant, NodeAssignment.ended_at.is_(None))))
    return query


class _Bound:
    """Bound parameters in place of the filters' values."""

    gpu_class: BindParameter[str] = bindparam("gpu_class")
    zone: BindParameter[str] = bindparam("zone")
    rack: BindParameter[str] = bindparam("rack")
    tenant: BindParameter[str] = bindparam("tenant")


_FILTER_VALUES = ("gpu_class", "zone", "rack", "tenant")
# One per combination of filters present and order (at most 288), built on first use.
_NODE_PAGES: dict[tuple[NodeFilters, tuple[str, ...]], KeysetPage] = {}


def node_page(db: Session, host_cluster_id: int, filters: NodeFilters, params: PageParams,
              sort_columns: Sequence[InstrumentedAttribute[Any]] = ()
              ) -> tuple[Sequence[Any], str | None]:
    """A page of ``_node_rows`` in id order (or that of ``sort_columns``), its statement
    built once per combination of filters and order (see ``app.http.pagination.KeysetPage``)."""
    present = [name for name in _FILTER_VALUES if getattr(filters, name)]
    shape = NodeFilters(**dict.fromkeys(present, "?"), ready=filters.ready,
                        include_gone=filters.include_gone)
    key = shape, tuple(column.key for column in sort_columns)
    page = _NODE_PAGES.get(key)
    if page is None:
        page = KeysetPage(_node_rows(bindparam("host_cluster_id"), shape, _Bound), Node.id,
                          sort_columns=sort_columns)
        _NODE_PAGES[key] = page
    values = {name: getattr(filters, name) for name in present}
    return page.rows(db, params, {"host_cluster_id": host_cluster_id, **values})


def node_rows_of(node_ids: Sequence[int]) -> NodeRows:
    return _with_class_and_tenant().where(Node.id.in_(list(node_ids)))


_LISTED = [column for column in Node.__table__.c if column.key != "labels"]


def _with_class_and_tenant() -> NodeRows:
    # The tenant comes by subqueries on the node's active assignment rather than by outer
    # joins, which PostgreSQL tends to merge from the first assignment on: a page deep in the
    # inventory would read thousands of assignments instead of one per node shown.
    active = (NodeAssignment.node_id == Node.id) & NodeAssignment.ended_at.is_(None)
    slug = (select(Tenant.slug).join(NodeAssignment, NodeAssignment.tenant_id == Tenant.id)
            .where(active).scalar_subquery())
    since = select(NodeAssignment.created_at).where(active).scalar_subquery()
    return (select(*_LISTED, Node.labels[lbl.TENANT].as_string().label("tenant_label"),
                   GpuClass.product, GpuClass.display_name, slug.label("tenant"),
                   since.label("assigned_at"))
            .outerjoin(GpuClass, GpuClass.id == Node.gpu_class_id))


def active_assignment(db: Session, node_id: int) -> NodeAssignment | None:
    return db.scalar(select(NodeAssignment).where(
        NodeAssignment.node_id == node_id, NodeAssignment.ended_at.is_(None))
        .execution_options(populate_existing=True))


def assignment_history(db: Session, node_id: int) -> list[tuple[NodeAssignment, str]]:
    rows = db.execute(
        select(NodeAssignment, Tenant.slug).join(Tenant, Tenant.id == NodeAssignment.tenant_id)
        .where(NodeAssignment.node_id == node_id).order_by(NodeAssignment.id.desc()))
    return [(assignment, slug) for assignment, slug in rows]


def end_assignment(db: Session, assignment_id: int, ended_by_id: int, now: datetime) -> bool:
    """Ends it only if still active: of two parallel ends, one wins."""
    result = db.execute(
        update(NodeAssignment)
        .where(NodeAssignment.id == assignment_id, NodeAssignment.ended_at.is_(None))
        .values(ended_at=now, ended_by_id=ended_by_id)
        .execution_options(synchronize_session=False))
    return isinstance(result, CursorResult) and result.rowcount == 1


def tenant_quota(db: Session, tenant_id: int, gpu_class_id: int,
                 region: str) -> TenantQuota | None:
    return db.scalar(select(TenantQuota).where(TenantQuota.tenant_id == tenant_id,
                                               TenantQuota.gpu_class_id == gpu_class_id,
                                               TenantQuota.region == region))


def dedicated_on_host(db: Session, tenant_id: int, gpu_class_id: int,
                      host: HostCluster) -> tuple[int, int]:
    """The GPUs of the class on the tenant's dedicated nodes of the host, and of those what
    its dedicated-nodes clusters there hold."""
    on_host = accounting.dedicated_gpus(tenant_id, gpu_class_id, host.region,
                                        host_cluster_id=host.id)
    held = accounting.held_gpus(tenant_id, gpu_class_id, host.region,
                                placement=accounting.DEDICATED, host_cluster_id=host.id)
    return int(db.scalar(on_host) or 0), int(db.scalar(held) or 0)


def _free(host_cluster_id: int, gpu_class_id: int) -> Any:
    """Ready, live, unassigned nodes of a class with whole GPUs: what can be dedicated."""
    assigned = select(NodeAssignment.node_id).where(NodeAssignment.ended_at.is_(None))
    return ((Node.host_cluster_id == host_cluster_id) & (Node.gpu_class_id == gpu_class_id)
            & Node.gone_at.is_(None) & Node.ready.is_(True) & (Node.gpu_count > 0)
            & Node.id.not_in(assigned))


def free_nodes(db: Session, host_cluster_id: int, gpu_class_id: int) -> list[Node]:
    return list(db.scalars(select(Node).where(_free(host_cluster_id, gpu_class_id))
                           .order_by(Node.name)))


def free_node_topology(db: Session, host_cluster_id: int,
                       gpu_class_id: int) -> list[tuple[str, int, str, str, str]]:
    """(name, GPUs, rack, clique, zone) of the free nodes: columns only, for placement."""
    query = (select(Node.name, Node.gpu_count, Node.rack, Node.clique, Node.zone)
             .where(_free(host_cluster_id, gpu_class_id)).order_by(Node.name))
    return list(db.execute(query).all())


# A tenant's dedicated nodes, with their class's product and display name.
_TENANT_NODES = KeysetPage(
    select(Node.id, Node.name, Node.gpu_count, Node.ready, Node.gone_at, GpuClass.product,
           GpuClass.display_name)
    .join(NodeAssignment, NodeAssignment.node_id == Node.id)
    .outerjoin(GpuClass, GpuClass.id == Node.gpu_class_id)
    .where(NodeAssignment.tenant_id == bindparam("tenant_id"), NodeAssignment.ended_at.is_(None)),
    Node.id)


def tenant_node_page(db: Session, tenant_id: int,
                     params: PageParams) -> tuple[Sequence[Any], str | None]:
    return _TENANT_NODES.rows(db, params, {"tenant_id": tenant_id})


def desired_tenants(db: Session, host_cluster_id: int) -> dict[str, str]:
    """node name -> tenant slug for every live node that should carry a tenant's label."""
    rows = db.execute(
        select(Node.name, Tenant.slug)
        .join(NodeAssignment, NodeAssignment.node_id == Node.id)
        .join(Tenant, Tenant.id == NodeAssignment.tenant_id)
        .where(Node.host_cluster_id == host_cluster_id, Node.gone_at.is_(None),
               NodeAssignment.ended_at.is_(None)))
    return dict(rows.all())


MAX_ZONES = 200


def live_zones(db: Session, host_cluster_id: int) -> list[str]:
    """The zones of live nodes, for a filter picker, in order.

    A walk along the zone index, one step per zone (a loose index scan), instead of reading
    every node as DISTINCT would: a fleet holds a few zones and tens of thousands of nodes.
    """
    def first_after(previous: Any) -> Any:
        return (select(Node.zone).where(Node.host_cluster_id == host_cluster_id,
                                        Node.zone > previous, Node.gone_at.is_(None))
                .order_by(Node.zone).limit(1).scalar_subquery())

    zones = select(first_after(literal("")).label("zone")).cte("zones", recursive=True)
    zones = zones.union_all(select(first_after(zones.c.zone)).where(zones.c.zone.is_not(None)))
    return list(db.scalars(select(zones.c.zone).where(zones.c.zone.is_not(None))
                           .limit(MAX_ZONES)))


def assignment_version(db: Session, host_cluster_id: int, node_id: int | None = None) -> str:
    """Assignments made and ended and nodes ready or gone, on one node or a whole host: what
    the fleet and node pages show of assignment state moves one of these."""
    assignments = select(func.count(), func.coalesce(func.max(NodeAssignment.id), 0),
                         func.count(NodeAssignment.ended_at)).join(
        Node, Node.id == NodeAssignment.node_id).where(Node.host_cluster_id == host_cluster_id)
    nodes = select(func.count(), func.count().filter(Node.ready),
                   func.count(Node.gone_at)).where(Node.host_cluster_id == host_cluster_id)
    if node_id is not None:
        assignments = assignments.where(NodeAssignment.node_id == node_id)
        nodes = nodes.where(Node.id == node_id)
    return "-".join(str(value) for value in (*db.execute(assignments).one(),
                                             *db.execute(nodes).one()))
