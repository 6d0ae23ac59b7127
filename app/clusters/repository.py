"""SQL for virtual clusters: lookups, quota sums and the reconcile lease."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    CursorResult,
    Integer,
    Select,
    Table,
    bindparam,
    case,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from app.accounting import standing as accounting
from app.accounting.standing import Standing
from app.clusters.models import (
    ClusterGpusInUse,
    ClusterGpuWait,
    ConditionTransition,
    VirtualCluster,
)
from app.database.concurrency import add_first_or_conflict, lock_row, lock_rows, upsert
from app.database.grant_units import amount_of
from app.database.prepared import Prepared, PreparedInsert
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.hosts.repository import ensure_default_host, hosts_in
from app.http.pagination import KeysetPage, PageParams
from app.kit.errors import Conflict
from app.nodes.models import Node, NodeAssignment
from app.quotas.models import TenantQuota
from app.tenants.models import GroupMapping


def clusters_query(tenant_id: int) -> Select[VirtualCluster]:
    return select(VirtualCluster).where(VirtualCluster.tenant_id == tenant_id)


LISTED_COLUMNS = (
    VirtualCluster.id, VirtualCluster.name, VirtualCluster.kubernetes_version,
    VirtualCluster.placement, VirtualCluster.gpu_class_id, VirtualCluster.gpus,
    VirtualCluster.unit, VirtualCluster.mig_profile, VirtualCluster.amount,
    VirtualCluster.cpu_millicores, VirtualCluster.memory_mib, VirtualCluster.template_version_id,
    VirtualCluster.pod_security, VirtualCluster.user_namespaces, VirtualCluster.generation,
    VirtualCluster.observed_generation, VirtualCluster.over_quota,
    VirtualCluster.deletion_requested_at, VirtualCluster.endpoint, VirtualCluster.conditions,
    VirtualCluster.created_at, VirtualCluster.updated_at, VirtualCluster.placement_reason,
    VirtualCluster.power, VirtualCluster.power_reason, VirtualCluster.power_changed_at,
    VirtualCluster.asleep_since, VirtualCluster.never_sleep,
    VirtualCluster.sleep_after_idle_minutes, VirtualCluster.idle_measure,
    VirtualCluster.sleep_schedule,
    VirtualCluster.sleep_timezone, VirtualCluster.delete_after_sleep_days,
    VirtualCluster.deletion_warned_at, VirtualCluster.deletion_due_at,
)


WAIT_COLUMNS = (ClusterGpuWait.pods.label("wait_pods"),
                ClusterGpuWait.reason.label("wait_reason"),
                ClusterGpuWait.observed_at.label("wait_observed_at"))
IN_USE_COLUMNS = (ClusterGpusInUse.guaranteed_gpus.label("in_use_guaranteed"),
                  ClusterGpusInUse.burst_gpus.label("in_use_burst"),
                  ClusterGpusInUse.observed_at.label("in_use_observed_at"))


def listed_rows_query(tenant_id: int | BindParameter[int]) -> Select[*tuple[Any, ...]]:
    """What a cluster list shows, as plain columns (no entities to build): a page in one
    statement, the GPU class's product and name joined as ``product`` and ``gpu_class_name``,
    the host's name and region as
    ``host_name`` and ``host_region``, the pods waiting for GPUs as ``WAIT_COLUMNS``, the GPUs
    in use as ``IN_USE_COLUMNS``."""
    return (select(*LISTED_COLUMNS, GpuClass.product,
                   GpuClass.display_name.label("gpu_class_name"),
                   HostCluster.name.label("host_name"),
                   HostCluster.region.label("host_region"), *WAIT_COLUMNS, *IN_USE_COLUMNS)
            .outerjoin(GpuClass, GpuClass.id == VirtualCluster.gpu_class_id)
            .join(HostCluster, HostCluster.id == VirtualCluster.host_cluster_id)
            .outerjoin(ClusterGpuWait, ClusterGpuWait.cluster_id == VirtualCluster.id)
            .outerjoin(ClusterGpusInUse, ClusterGpusInUse.cluster_id == VirtualCluster.id)
            .where(VirtualCluster.tenant_id == tenant_id))


def gpu_wait(db: Session, cluster_id: int) -> ClusterGpuWait | None:
    return db.get(ClusterGpuWait, cluster_id)


def gpus_in_use(db: Session, cluster_id: int) -> ClusterGpusInUse | None:
    return db.get(ClusterGpusInUse, cluster_id)


def record_gpu_waits(db: Session, waits: Mapping[int, tuple[int, str]],
                     observed_at: datetime) -> None:
    """Pods waiting and KAI's reason by cluster id; a cluster's row goes with the cluster."""
    upsert(db, ClusterGpuWait, [
        {"cluster_id": cluster_id, "pods": pods, "reason": reason, "observed_at": observed_at}
        for cluster_id, (pods, reason) in sorted(waits.items())], keys=("cluster_id",))


def record_gpus_in_use(db: Session, in_use: Mapping[int, tuple[float, float] | None],
                       observed_at: datetime) -> None:
    gone = [cluster_id for cluster_id, figures in in_use.items() if figures is None]
    if gone:
        db.execute(delete(ClusterGpusInUse).where(ClusterGpusInUse.cluster_id.in_(gone)))
    upsert(db, ClusterGpusInUse, [
        {"cluster_id": cluster_id, "guaranteed_gpus": figures[0], "burst_gpus": figures[1],
         "observed_at": observed_at}
        for cluster_id, figures in sorted(in_use.items()) if figures is not None],
        keys=("cluster_id",))


_LISTED_PAGE = KeysetPage(listed_rows_query(bindparam("tenant_id", type_=Integer)),
                          VirtualCluster.id)


def listed_page(db: Session, tenant_id: int,
                params: PageParams) -> tuple[Sequence[Any], str | None]:
    """A page of ``listed_rows_query``."""
    return _LISTED_PAGE.rows(db, params, {"tenant_id": tenant_id})


def cluster_by_name(db: Session, tenant_id: int, name: str) -> VirtualCluster | None:
    return db.scalar(clusters_query(tenant_id).where(VirtualCluster.name == name))


_NAMED = Prepared(select(VirtualCluster.id).where(
    VirtualCluster.tenant_id == bindparam("tenant_id"), VirtualCluster.name == bindparam("name")))


def name_taken(db: Session, tenant_id: int, name: str) -> bool:
    """The tenant has a cluster of that name: its id read, not the row."""
    return bool(_NAMED.rows(db, {"tenant_id": tenant_id, "name": name}))


def cluster_count(db: Session, tenant_id: int) -> int:
    """The tenant's clusters, those being deleted included (they still run on the host)."""
    return db.scalar(select(func.count()).select_from(VirtualCluster)
                     .where(VirtualCluster.tenant_id == tenant_id)) or 0


_CLUSTERS = cast(Table, VirtualCluster.__table__)
_ADD_CLUSTER = PreparedInsert(_CLUSTERS, returning=list(_CLUSTERS.columns))


def add_cluster(db: Session, values: Mapping[str, Any], name_taken: Conflict) -> Any:
    """A new cluster's row, every column as stored; a name taken by a parallel create is
    ``name_taken``. The transaction's first write (see ``add_first_or_conflict``)."""
    return add_first_or_conflict(db, _ADD_CLUSTER, amount_of(values), name_taken)


def lock_cluster(db: Session, cluster_id: int) -> VirtualCluster | None:
    return lock_row(db, VirtualCluster, cluster_id)


def lock_quota(db: Session, tenant_id: int, gpu_class_id: int,
               region: str) -> TenantQuota | None:
    """The tenant's quota row of a class in a region, locked: creates and resizes of a class
    in a region queue here."""
    quota_id = db.scalar(select(TenantQuota.id).where(
        TenantQuota.tenant_id == tenant_id, TenantQuota.gpu_class_id == gpu_class_id,
        TenantQuota.region == region).order_by(TenantQuota.id).limit(1))  # one row per unit
    return lock_row(db, TenantQuota, quota_id) if quota_id is not None else None


def in_region(region: str) -> ColumnElement[bool]:
    """The cluster is on a host of ``region``."""
    return VirtualCluster.host_cluster_id.in_(hosts_in(region))


def clusters_with_gpus(db: Session, tenant_id: int, gpu_class_id: int,
                       region: str) -> list[VirtualCluster]:
    query = clusters_query(tenant_id).where(VirtualCluster.gpu_class_id == gpu_class_id,
                                            VirtualCluster.gpus > 0, in_region(region))
    return list(db.scalars(query.order_by(VirtualCluster.id)))


def over_quota_clusters(db: Session, tenant_id: int, gpu_class_id: int,
                        region: str) -> list[VirtualCluster]:
    query = clusters_query(tenant_id).where(VirtualCluster.gpu_class_id == gpu_class_id,
                                            VirtualCluster.over_quota.is_(True),
                                            in_region(region))
    return list(db.scalars(query.order_by(VirtualCluster.id)))


def tenant_quotas(db: Session, tenant_id: int, region: str | None = None) -> list[TenantQuota]:
    query = select(TenantQuota).where(TenantQuota.tenant_id == tenant_id)
    if region is not None:
        query = query.where(TenantQuota.region == region)
    return list(db.scalars(query.order_by(TenantQuota.id)))


_LOCK_QUOTAS = Prepared(select(TenantQuota.id)
                        .where(TenantQuota.tenant_id == bindparam("tenant_id"),
                               TenantQuota.gpu_class_id == bindparam("gpu_class_id"))
                        .order_by(TenantQuota.id).with_for_update())


def standings(db: Session, tenant_id: int, gpu_class_id: int, *, lock: bool = False,
              excluding: int | None = None) -> dict[str, Standing]:
    """region -> the tenant's standing of the class there (``app.accounting.standing``); with
    ``lock``, under the lock of every quota row of the class (in id order), which a create
    takes before it knows its region."""
    if lock:
        lock_rows(db, TenantQuota, TenantQuota.tenant_id == tenant_id,
                  TenantQuota.gpu_class_id == gpu_class_id)
        _LOCK_QUOTAS.rows(db, {"tenant_id": tenant_id, "gpu_class_id": gpu_class_id})
    # Read after the lock, in a statement of its own: on PostgreSQL a statement sees what was
    # committed when it began, and the lock may have waited for a create to commit.
    return accounting.standings(db, tenant_id, gpu_class_id, excluding=excluding)


GrantKey = tuple[int, str, str]
"""(GPU class id, unit, MIG profile): one unit of a class (``app.kit.gpu_units``)."""


def shared_guarantees(db: Session, tenant_id: int, region: str) -> dict[GrantKey, int]:
    """(class id, unit, profile) -> what the shared pool of the region guarantees the tenant
    of the class in that unit, in its steps (whole GPUs, slices, hundredths)."""
    return {(class_id, unit, profile): found.shared_guarantee
            for (_, class_id, of_region, unit, profile), found
            in accounting.every_standing(db, tenant_id).items()
            if of_region == region}


# ----- what placement sees of each host


@dataclass(frozen=True)
class HostRow:
    id: int
    name: str
    region: str
    state: str
    has_credentials: bool  # stored ones, or the environment's (the default host)
    answers: bool | None  # its last health check; None: never checked
    has_webhook: bool = True  # a way for its API server to the admission webhook


# Its API server has a way to the admission webhook: the environment's host (the Service or
# PORTAL_WEBHOOK_URL), or a webhook URL set on the host (app/hosts/webhook_route.py).
_REACHES_WEBHOOK = or_(HostCluster.is_default, HostCluster.webhook_url.is_not(None))


_HOST_COLUMNS = (HostCluster.id, HostCluster.name, HostCluster.region, HostCluster.state,
                 HostCluster.is_default,
                 HostCluster.credentials_encrypted.is_not(None).label("has_credentials"),
                 HostCluster.health_reachable, _REACHES_WEBHOOK.label("reaches_webhook"))


def _host_row(row: Any) -> HostRow:
    return HostRow(row[0], row[1], row[2], str(row[3]), bool(row[4] or row[5]), row[6],
                   bool(row[7]))


def host_rows(db: Session) -> list[HostRow]:
    """Every registered host cluster, by name, as placement sees it."""
    rows = db.execute(select(*_HOST_COLUMNS).order_by(HostCluster.name))
    return [_host_row(row) for row in rows]


_SHARED_OF_CLASS = (select(func.coalesce(func.sum(VirtualCluster.gpus), 0))
                    .where(VirtualCluster.placement == "shared-pool",
                           VirtualCluster.gpu_class_id == bindparam("gpu_class_id"),
                           VirtualCluster.host_cluster_id == HostCluster.id)
                    .scalar_subquery())
_HOSTS_WITH_SHARED = Prepared(select(*_HOST_COLUMNS, _SHARED_OF_CLASS.label("shared_gpus"))
                              .order_by(HostCluster.name))


def host_rows_with_shared_gpus(db: Session,
                               gpu_class_id: int) -> tuple[list[HostRow], dict[int, int]]:
    """``host_rows``, and host -> the GPUs of the class held by shared-pool clusters there
    (``shared_gpus_per_host`` of one class), in one statement."""
    rows = _HOSTS_WITH_SHARED.rows(db, {"gpu_class_id": gpu_class_id})
    return [_host_row(row) for row in rows], {row[0]: int(row[8] or 0) for row in rows}


def host_webhook_reach(db: Session, host_cluster_id: int) -> tuple[str, bool]:
    """The host's name, and whether its API server has a way to the admission webhook (the
    environment's host, or one with a webhook URL), as ``host_rows`` tells placement."""
    row = db.execute(select(HostCluster.name, _REACHES_WEBHOOK)
                     .where(HostCluster.id == host_cluster_id)).one()
    return row[0], bool(row[1])


def shared_gpus_per_host(db: Session, gpu_class_id: int | None) -> dict[tuple[int, int], int]:
    """(host, class) -> GPUs held by shared-pool clusters there; of one class when given (read
    from ``ix_virtual_clusters_shared_pool_gpus`` alone)."""
    query = (select(VirtualCluster.host_cluster_id, VirtualCluster.gpu_class_id,
                    func.sum(VirtualCluster.gpus))
             .where(VirtualCluster.placement == "shared-pool")
             .group_by(VirtualCluster.gpu_class_id, VirtualCluster.host_cluster_id))
    query = query.where(VirtualCluster.gpu_class_id.is_not(None) if gpu_class_id is None
                        else VirtualCluster.gpu_class_id == gpu_class_id)
    return {(row[0], row[1] or 0): int(row[2] or 0) for row in db.execute(query)}


def tenant_node_gpus(db: Session, tenant_id: int, gpu_class_id: int, *,
                     host_cluster_id: int | None = None) -> dict[int, int]:
    """host -> GPUs of the class on live nodes dedicated to the tenant there."""
    query = (select(Node.host_cluster_id, func.sum(Node.gpu_count))
             .join(NodeAssignment, (NodeAssignment.node_id == Node.id)
                   & NodeAssignment.ended_at.is_(None))
             .where(NodeAssignment.tenant_id == tenant_id, Node.gpu_class_id == gpu_class_id,
                    Node.gone_at.is_(None))
             .group_by(Node.host_cluster_id))
    if host_cluster_id is not None:
        query = query.where(Node.host_cluster_id == host_cluster_id)
    return {row[0]: int(row[1] or 0) for row in db.execute(query)}


def tenant_dedicated_held(db: Session, tenant_id: int, gpu_class_id: int,
                          excluding: int | None = None) -> dict[int, int]:
    """host -> GPUs of the class held by the tenant's dedicated-nodes clusters there."""
    query = (select(VirtualCluster.host_cluster_id, func.sum(VirtualCluster.gpus))
             .where(VirtualCluster.tenant_id == tenant_id,
                    VirtualCluster.gpu_class_id == gpu_class_id,
                    VirtualCluster.placement == "dedicated-nodes")
             .group_by(VirtualCluster.host_cluster_id))
    if excluding is not None:
        query = query.where(VirtualCluster.id != excluding)
    return {row[0]: int(row[1] or 0) for row in db.execute(query)}


def host_cluster(db: Session, host_cluster_id: int) -> HostCluster | None:
    return db.get(HostCluster, host_cluster_id)


def ensure_a_host(db: Session) -> None:
    """A database that has no host yet (built without migrations) gets the environment's."""
    if db.scalar(select(HostCluster.id).limit(1)) is None:
        ensure_default_host(db)


def group_roles(db: Session, tenant_id: int) -> list[tuple[str, str]]:
    """(IdP group, role) of every group mapped into the tenant: its teams, for KAI queues."""
    rows = db.execute(select(GroupMapping.group_name, GroupMapping.role)
                      .where(GroupMapping.tenant_id == tenant_id)
                      .order_by(GroupMapping.group_name))
    return [(group, role) for group, role in rows]


def class_products(db: Session, class_ids: list[int]) -> dict[int, str]:
    rows = db.execute(select(GpuClass.id, GpuClass.product).where(GpuClass.id.in_(class_ids)))
    return dict(rows.all())


def class_names(db: Session, class_ids: list[int]) -> dict[int, tuple[str, str]]:
    """Each class's product and display name."""
    rows = db.execute(select(GpuClass.id, GpuClass.product, GpuClass.display_name)
                      .where(GpuClass.id.in_(class_ids)))
    return {row.id: (row.product, row.display_name) for row in rows}


def tenant_hosts(db: Session, tenant_id: int | None = None) -> list[tuple[int, int]]:
    """(tenant id, host cluster id) of every tenant with a cluster on a host (of one tenant)."""
    query = select(VirtualCluster.tenant_id, VirtualCluster.host_cluster_id).distinct()
    if tenant_id is not None:
        query = query.where(VirtualCluster.tenant_id == tenant_id)
    return [(tenant, host) for tenant, host in db.execute(query).all()]


def has_clusters_on(db: Session, tenant_id: int, host_cluster_id: int) -> bool:
    """Whether the tenant has a cluster on the host (its queue there stays for them)."""
    query = select(VirtualCluster.id).where(
        VirtualCluster.tenant_id == tenant_id,
        VirtualCluster.host_cluster_id == host_cluster_id).limit(1)
    return db.scalar(query) is not None


def asleep_held(db: Session, tenant_id: int, host_cluster_id: int) -> dict[tuple[str, str], int]:
    """(unit, profile) -> what the tenant's shared-pool clusters on the host that are to sleep
    hold, in the unit's steps (``gpus`` of whole GPUs, ``amount`` of the others): their
    guarantee goes back to the pool."""
    clusters = VirtualCluster
    held = case((clusters.unit == "gpu", clusters.gpus), else_=clusters.amount)
    rows = db.execute(
        select(clusters.unit, clusters.mig_profile, func.sum(held))
        .where(clusters.tenant_id == tenant_id, clusters.host_cluster_id == host_cluster_id,
               clusters.placement == "shared-pool", clusters.power == "asleep")
        .group_by(clusters.unit, clusters.mig_profile))
    return {(unit, profile): int(amount or 0) for unit, profile, amount in rows}


def delete_cluster_row(db: Session, cluster_id: int) -> None:
    db.execute(delete(VirtualCluster).where(VirtualCluster.id == cluster_id))


# ----- what the worker writes


def every_cluster_id(db: Session) -> list[int]:
    return list(db.scalars(select(VirtualCluster.id)))


def update_status(db: Session, cluster_id: int, **values: Any) -> bool:
    """Writes the worker's view of a cluster (conditions, credential, counters) without moving
    ``updated_at`` unless asked; False when the row is gone. New conditions, and conditions
    whose status flipped, are kept as transitions too."""
    if "conditions" in values:
        _record_transitions(db, cluster_id, values["conditions"])
    values.setdefault("updated_at", VirtualCluster.updated_at)
    result = db.execute(
        update(VirtualCluster)
        .where(VirtualCluster.id == cluster_id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return isinstance(result, CursorResult) and result.rowcount == 1


# A cluster's page draws its latest transitions; older ones are dropped as new ones come.
KEPT_TRANSITIONS = 20


def _record_transitions(db: Session, cluster_id: int, conditions: list[Any]) -> None:
    before = db.scalar(select(VirtualCluster.conditions).where(VirtualCluster.id == cluster_id))
    known = {_transition_key(c) for c in before or []}
    new = sorted((c for c in conditions if _transition_key(c) not in known),
                 key=lambda c: str(c.get("lastTransitionTime", "")))
    if before is None or not new:
        return
    db.add_all(ConditionTransition(
        cluster_id=cluster_id, type=str(c.get("type", ""))[:200],
        status=str(c.get("status", ""))[:10], reason=str(c.get("reason", ""))[:200],
        message=str(c.get("message", "")), at=_transition_time(c)) for c in new)
    db.flush()
    oldest_kept = db.scalar(select(ConditionTransition.id)
                            .where(ConditionTransition.cluster_id == cluster_id)
                            .order_by(ConditionTransition.id.desc())
                            .offset(KEPT_TRANSITIONS - 1).limit(1))
    if oldest_kept is not None:
        db.execute(delete(ConditionTransition).where(
            ConditionTransition.cluster_id == cluster_id, ConditionTransition.id < oldest_kept))


def _transition_key(condition: Any) -> tuple[str, str, str]:
    return (str(condition.get("type")), str(condition.get("status")),
            str(condition.get("lastTransitionTime")))


def _transition_time(condition: Any) -> datetime:
    stamp = str(condition.get("lastTransitionTime", ""))
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(UTC)


def condition_transitions(db: Session, cluster_id: int) -> list[ConditionTransition]:
    """The cluster's kept transitions, oldest first."""
    return list(db.scalars(select(ConditionTransition)
                           .where(ConditionTransition.cluster_id == cluster_id)
                           .order_by(ConditionTransition.id)))


def generation_of(db: Session, cluster_id: int) -> int | None:
    return db.scalar(select(VirtualCluster.generation).where(VirtualCluster.id == cluster_id))


def sleep_policy_clusters(db: Session) -> list[VirtualCluster]:
    """Live clusters a sleep policy may act on now: with idle minutes or a schedule, or asleep
    with a schedule to wake them or days before deletion."""
    asleep = VirtualCluster.power == "asleep"
    return list(db.scalars(select(VirtualCluster).where(
        VirtualCluster.deletion_requested_at.is_(None),
        or_(VirtualCluster.sleep_after_idle_minutes.is_not(None),
            VirtualCluster.sleep_schedule.is_not(None),
            asleep & (VirtualCluster.power_reason == "schedule"),
            asleep & VirtualCluster.delete_after_sleep_days.is_not(None)))
        .order_by(VirtualCluster.id)))
