"""What a cluster's create or resize must pass before it is written: a known version and GPU
class, a spec the builders accept, the tenant's quota room (under the quota row's lock when it
writes), the tenant's dedicated nodes, and a host that fits (``place``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from app.clusters import desired, known_classes, placement, repository
from app.clusters.models import VirtualCluster
from app.clusters.placement import Placed, PlacementRequest, Unplaceable
from app.clusters.repository import QuotaRoom
from app.clusters.schemas import ClusterCreate
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kit.errors import Conflict, ValidationFailed
from app.nodes import fleet_gpus
from app.quotas import regions
from app.tenants.models import Tenant

DEDICATED = "dedicated-nodes"


def place(db: Session, settings: Settings, tenant: Tenant, payload: ClusterCreate,
          gpu_class: GpuClass | None, hardened: str | None,
          rooms: Mapping[str, QuotaRoom]) -> Placed:
    """The host placement picks for the request, given the tenant's quota ``rooms`` of the
    class by region. Too little quota or too few dedicated GPUs anywhere the request may go is
    the tenant's to fix (422 on gpus); any other refusal is a 409 naming each host's
    reasons."""
    if payload.region:
        regions.resolve(db, payload.region)  # 422 on a region no host is in
    request = PlacementRequest(
        placement=payload.placement, gpu_class_id=gpu_class.id if gpu_class else None,
        gpu_class_name=gpu_class.display_name if gpu_class else "",
        gpus=payload.gpus if gpu_class else 0, region=payload.region or None,
        quota_free={region: room.free for region, room in rooms.items()},
        needs_webhook=(payload.placement == "shared-pool"
                       and settings.vcluster_edition == "oss"),
        hardening=hardened)
    hosts = host_facts(db, tenant.id, request)
    if gpu_class is not None and request.gpus > 0:
        check_room(db, tenant, gpu_class, request, hosts)
    result = placement.place(hosts, request)
    if isinstance(result, Unplaceable):
        raise NoHostFits(result)
    return result


def check_room(db: Session, tenant: Tenant, gpu_class: GpuClass, request: PlacementRequest,
               hosts: list[placement.HostFacts]) -> None:
    """Quota, and for dedicated nodes the tenant's nodes, with room in some region the request
    may go to (its own, or any)."""
    allowed = ({request.region} if request.region is not None
               else {h.region for h in hosts} | set(request.quota_free))
    rooms = {region: request.quota_free.get(region, 0) for region in sorted(allowed)}
    if max(rooms.values(), default=0) < request.gpus:
        if len(rooms) == 1:
            region = next(iter(rooms))
            check_quota(db, tenant, gpu_class, region, "shared-pool", request.gpus, lock=False,
                        host_cluster_id=0)
        listed = ", ".join(f"{r or '(none)'}: {max(g, 0)}" for r, g in rooms.items())
        raise ValidationFailed.on_field(
            "gpus", f"the tenant's {gpu_class.display_name} quota has room for fewer than "
                    f"{request.gpus} GPUs in every region ({listed}); request more quota first")
    if request.placement != DEDICATED:
        return
    candidates = [h for h in hosts if h.region in allowed]
    free = max((h.tenant_node_gpus.get(gpu_class.id, 0) for h in candidates), default=0)
    if free < request.gpus:
        on_nodes = sum(repository.tenant_node_gpus(db, tenant.id, gpu_class.id).values())
        raise ValidationFailed.on_field(
            "gpus", f"{max(free, 0)} {gpu_class.display_name} GPUs are free on the nodes "
                    f"dedicated to the tenant ({on_nodes} in all); ask a platform admin to "
                    "assign nodes, or use the shared pool")


def host_facts(db: Session, tenant_id: int,
               request: PlacementRequest) -> list[placement.HostFacts]:
    """What placement needs to know of every host for ``request``: a handful of aggregate
    queries. The free GPUs are of the requested class only when GPUs are asked (else of every
    class), and the tenant's dedicated nodes are read only for a dedicated-nodes request."""
    only = request.gpu_class_id if request.gpus > 0 else None
    hosts, shared = _hosts_and_shared(db, only)
    if not hosts:
        repository.ensure_a_host(db)
        hosts, shared = _hosts_and_shared(db, only)
    on_nodes = fleet_gpus.per_host_and_class(db)
    tenant_nodes: dict[int, int] = {}
    if request.gpu_class_id is not None and request.placement == DEDICATED:
        held = repository.tenant_dedicated_held(db, tenant_id, request.gpu_class_id)
        tenant_nodes = {host: gpus - held.get(host, 0) for host, gpus in
                        repository.tenant_node_gpus(db, tenant_id,
                                                    request.gpu_class_id).items()}
    return [placement.HostFacts(
        host.id, host.name, host.region, host.state,
        {c: total for (h, c), (total, _) in on_nodes.items() if h == host.id},
        {c: total - dedicated - shared.get((h, c), 0)
         for (h, c), (total, dedicated) in on_nodes.items() if h == host.id and only in (None, c)},
        {request.gpu_class_id: tenant_nodes.get(host.id, 0)}
        if request.gpu_class_id is not None else {},
        host.has_credentials, host.answers, host.has_webhook) for host in hosts]


def _hosts_and_shared(db: Session, only: int | None,
                      ) -> tuple[list[repository.HostRow], dict[tuple[int, int], int]]:
    """The hosts, and (host, class) -> GPUs shared-pool clusters hold there, of class ``only``
    (one statement) or of every class."""
    if only is None:
        return repository.host_rows(db), repository.shared_gpus_per_host(db, None)
    hosts, shared = repository.host_rows_with_shared_gpus(db, only)
    return hosts, {(host, only): gpus for host, gpus in shared.items()}


class NoHostFits(Conflict):
    """409: no host fits; the problem lists each host with its reasons."""

    def __init__(self, result: Unplaceable) -> None:
        super().__init__(result.message, errors=[{"field": "region", "message": result.message}])
        self.hosts = [{"host": h.host_name, "region": h.region, "reasons": list(h.reasons)}
                      for h in result.hosts]

    def to_problem(self, instance: str, request_id: str) -> dict[str, Any]:
        return {**super().to_problem(instance, request_id), "hosts": self.hosts}


def check_version(settings: Settings, version: str | None) -> None:
    if version is not None and version not in settings.kubernetes_versions:
        offered = ", ".join(settings.kubernetes_versions)
        raise ValidationFailed.on_field("kubernetes_version", f"choose one of {offered}")


def gpu_class_of(db: Session, gpu_class_id: int | None, gpus: int) -> GpuClass | None:
    if gpu_class_id is None:
        if gpus > 0:
            raise ValidationFailed.on_field("gpu_class_id", "choose the class of the GPUs")
        return None
    gpu_class = known_classes.gpu_class(db, gpu_class_id)
    if gpu_class is None:
        raise ValidationFailed.on_field("gpu_class_id", f"there is no GPU class {gpu_class_id}")
    return gpu_class


def check_spec(db: Session, settings: Settings, tenant: Tenant, payload: ClusterCreate,
               gpu_class: GpuClass | None) -> None:
    """The builders' own validation, so a request the worker could not build is refused now."""
    probe = VirtualCluster(
        name=payload.name, placement=payload.placement, gpus=payload.gpus,
        kubernetes_version=payload.kubernetes_version or settings.kubernetes_versions[0],
        cpu_millicores=payload.cpu_millicores, memory_mib=payload.memory_mib, endpoint="")
    try:
        desired.cluster_spec(probe, tenant, gpu_class, settings)
    except ValueError as error:
        raise ValidationFailed.on_field("name", str(error)) from error


def check_placed(db: Session, tenant: Tenant, gpu_class: GpuClass, payload: ClusterCreate,
                 placed: Placed, rooms: Mapping[str, QuotaRoom]) -> None:
    """The quota's room in the region placement chose, as ``rooms`` read it (under its lock
    for a create), and for dedicated nodes the tenant's nodes on the chosen host."""
    room = rooms.get(placed.region, QuotaRoom(0, 0))
    if payload.gpus == 0:
        return
    _refuse_beyond_quota(gpu_class, placed.region, payload.gpus, room)
    if payload.placement == DEDICATED:
        check_dedicated(db, tenant, gpu_class, payload.gpus, placed.host_id, None)


def _refuse_beyond_quota(gpu_class: GpuClass, region: str, gpus: int, room: QuotaRoom) -> None:
    if gpus > room.free:
        where = f" in region {region}" if region else ""
        raise ValidationFailed.on_field(
            "gpus", f"{max(room.free, 0)} of the tenant's {room.approved} "
                    f"{gpu_class.display_name} GPUs{where} are free; request more quota first")


def check_quota(db: Session, tenant: Tenant, gpu_class: GpuClass, region: str, placement: str,
                gpus: int, *, lock: bool, host_cluster_id: int,
                excluding: int | None = None) -> None:
    """Under the lock of the quota row of the class in the region, what placement saw without
    it: the quota's room there, and for dedicated nodes the tenant's nodes on the host."""
    if lock:
        quota = repository.lock_quota(db, tenant.id, gpu_class.id, region)
    else:
        quota = next((q for q in repository.tenant_quotas(db, tenant.id, region)
                      if q.gpu_class_id == gpu_class.id), None)
    if gpus == 0:
        return
    held = repository.allocated_gpus(db, tenant.id, gpu_class.id, region, excluding=excluding)
    _refuse_beyond_quota(gpu_class, region, gpus, QuotaRoom(quota.gpus if quota else 0, held))
    if placement == DEDICATED:
        check_dedicated(db, tenant, gpu_class, gpus, host_cluster_id, excluding)


def check_dedicated(db: Session, tenant: Tenant, gpu_class: GpuClass, gpus: int,
                    host_cluster_id: int, excluding: int | None) -> None:
    on_nodes = repository.tenant_node_gpus(db, tenant.id, gpu_class.id,
                                           host_cluster_id=host_cluster_id).get(host_cluster_id, 0)
    held = repository.tenant_dedicated_held(db, tenant.id, gpu_class.id,
                                            excluding=excluding).get(host_cluster_id, 0)
    if gpus > on_nodes - held:
        raise ValidationFailed.on_field(
            "gpus", f"{max(on_nodes - held, 0)} {gpu_class.display_name} GPUs are free on the "
                    f"nodes dedicated to the tenant ({on_nodes} in all); ask a platform admin "
                    "to assign nodes, or use the shared pool")
