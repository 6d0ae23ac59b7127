"""What a cluster's create or resize must pass before it is written: a known version and GPU
class, a spec the builders accept, the tenant's standing (``app.accounting.standing``, under the
quota row's lock when it writes): for a shared-pool cluster the quota its dedicated nodes and
shared-pool clusters leave, for a dedicated-nodes cluster its dedicated GPUs no cluster holds,
and a host that fits (``place``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from app.accounting import machine_pool
from app.accounting.standing import Standing, shared_refusal
from app.clusters import desired, known_classes, placement, repository
from app.clusters.models import VirtualCluster
from app.clusters.placement import Placed, PlacementRequest, Unplaceable
from app.clusters.schemas import ClusterCreate
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kit.errors import Conflict, ValidationFailed
from app.nodes import fleet_gpus
from app.quotas import regions
from app.tenants.models import Tenant

DEDICATED = "dedicated-nodes"
PRIVATE = "private-nodes"


def place(db: Session, settings: Settings, tenant: Tenant, payload: ClusterCreate,
          gpu_class: GpuClass | None, hardened: str | None,
          rooms: Mapping[str, Standing]) -> Placed:
    """The host placement picks for the request, given the tenant's standings (``rooms``) of
    the class by region. Too little quota or too few dedicated GPUs anywhere the request may go is
    the tenant's to fix (422 on gpus); any other refusal is a 409 naming each host's
    reasons."""
    if payload.region:
        regions.resolve(db, payload.region)  # 422 on a region no host is in
    request = PlacementRequest(
        placement=payload.placement, gpu_class_id=gpu_class.id if gpu_class else None,
        gpu_class_name=gpu_class.display_name if gpu_class else "",
        gpus=payload.gpus if gpu_class else 0, region=payload.region or None,
        quota_free={region: room.left_for(payload.placement)
                    for region, room in rooms.items()},
        needs_webhook=(payload.placement == "shared-pool"
                       and settings.vcluster_edition == "oss"),
        hardening=hardened)
    if payload.placement == PRIVATE and (gpu_class is None or payload.gpus <= 0):
        raise ValidationFailed.on_field(
            "gpus", "a private-nodes cluster is made of whole GPU machines: choose a GPU class "
                    "and a number of GPUs")
    hosts = host_facts(db, tenant.id, request)
    if gpu_class is not None and request.gpus > 0:
        check_room(db, tenant, gpu_class, request, hosts)
    result = placement.place(hosts, request)
    if isinstance(result, Unplaceable):
        raise NoHostFits(result)
    return result


def check_room(db: Session, tenant: Tenant, gpu_class: GpuClass, request: PlacementRequest,
               hosts: list[placement.HostFacts]) -> None:
    """For a shared-pool cluster, the tenant's quota left for shared-pool clusters; for a
    dedicated-nodes one, its dedicated nodes: with room in some region the request may go to
    (its own, or any)."""
    allowed = ({request.region} if request.region is not None
               else {h.region for h in hosts} | set(request.quota_free))
    if request.placement == PRIVATE:
        candidates = [h for h in hosts if h.region in allowed]
        if candidates and all(h.private_unfit is not None for h in candidates):
            raise ValidationFailed.on_field("gpus", "; ".join(
                f"{h.name}: {h.private_unfit}" for h in candidates))
    if request.placement == DEDICATED:
        candidates = [h for h in hosts if h.region in allowed]
        free = max((h.tenant_node_gpus.get(gpu_class.id, 0) for h in candidates), default=0)
        if free < request.gpus:
            on_nodes = sum(repository.tenant_node_gpus(db, tenant.id, gpu_class.id).values())
            raise _beyond_nodes(gpu_class, free, on_nodes)
        return
    rooms = {region: request.quota_free.get(region, 0) for region in sorted(allowed)}
    if max(rooms.values(), default=0) >= request.gpus:
        return
    if len(rooms) == 1:
        check_quota(db, tenant, gpu_class, next(iter(rooms)), request.placement, request.gpus,
                    lock=False, host_cluster_id=None)
    listed = ", ".join(f"{r or '(none)'}: {max(g, 0)}" for r, g in rooms.items())
    raise ValidationFailed.on_field(
        "gpus", f"the tenant's {gpu_class.display_name} quota, less its dedicated nodes and "
                f"shared-pool clusters, has room for fewer than {request.gpus} GPUs in every "
                f"region ({listed}); request more quota first")


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
    private: dict[int, str | None] = {}
    if request.gpu_class_id is not None and request.placement == PRIVATE:
        pools = machine_pool.pools(db, request.gpu_class_id)
        private = {host.id: private_unfit(pools.get(host.id, machine_pool.Pool()),
                                          request.gpus, request.gpu_class_name)
                   for host in hosts}
    return [placement.HostFacts(
        host.id, host.name, host.region, host.state,
        {c: total for (h, c), (total, _) in on_nodes.items() if h == host.id},
        {c: total - dedicated - shared.get((h, c), 0)
         for (h, c), (total, dedicated) in on_nodes.items() if h == host.id and only in (None, c)},
        {request.gpu_class_id: tenant_nodes.get(host.id, 0)}
        if request.gpu_class_id is not None else {},
        host.has_credentials, host.answers, host.has_webhook, private.get(host.id))
        for host in hosts]


def private_unfit(pool: machine_pool.Pool, gpus: int, class_name: str) -> str | None:
    """Why a host's free machines cannot make ``gpus`` exactly (None: they can): a
    private-nodes cluster is whole machines."""
    if pool.fits(gpus):
        return None
    sizes = ", ".join(str(g) for g in pool.free) or "none"
    promised = (f", {pool.promised} of them promised to clusters waiting for machines"
                if pool.promised else "")
    if gpus > pool.room:
        return (f"its pool has {pool.free_gpus} {class_name} GPUs on free machines{promised}, "
                f"{gpus} asked")
    return (f"{gpus} {class_name} GPUs are not a sum of whole free machines' GPUs (free "
            f"machines here have {sizes} GPUs each); ask for a count they add up to")


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
               gpu_class: GpuClass | None, unit: Mapping[str, object] | None = None) -> None:
    """The builders' own validation, so a request the worker could not build is refused now;
    ``unit`` the columns of a cluster of slices or a share (``unit``, ``mig_profile``,
    ``amount``), built as the worker will build it."""
    probe = VirtualCluster(
        name=payload.name, placement=payload.placement, gpus=payload.gpus,
        kubernetes_version=payload.kubernetes_version or settings.kubernetes_versions[0],
        cpu_millicores=payload.cpu_millicores, memory_mib=payload.memory_mib, endpoint="",
        **(unit or {}))
    try:
        desired.cluster_spec(probe, tenant.slug, gpu_class, settings)
    except ValueError as error:
        raise ValidationFailed.on_field("name", str(error)) from error


def check_placed(db: Session, tenant: Tenant, gpu_class: GpuClass, payload: ClusterCreate,
                 placed: Placed, rooms: Mapping[str, Standing]) -> None:
    """The tenant's standing in the region placement chose, as ``rooms`` read it (under its
    lock for a create), and for dedicated nodes the tenant's nodes on the chosen host."""
    if payload.gpus == 0:
        return
    if payload.placement == DEDICATED:
        check_dedicated(db, tenant, gpu_class, payload.gpus, placed.host_id, None)
    else:
        _refuse_beyond_quota(gpu_class, placed.region, payload.gpus,
                             rooms.get(placed.region, Standing()), payload.placement)


def _refuse_beyond_quota(gpu_class: GpuClass, region: str, gpus: int, room: Standing,
                         placement: str = "shared-pool") -> None:
    refusal = shared_refusal(room, gpus, gpu_class.display_name, region, placement)
    if refusal is not None:
        raise ValidationFailed.on_field("gpus", refusal)


def check_quota(db: Session, tenant: Tenant, gpu_class: GpuClass, region: str, placement: str,
                gpus: int, *, lock: bool, host_cluster_id: int | None,
                excluding: int | None = None) -> None:
    """Under the lock of the quota row of the class in the region, what placement saw without
    it: for a shared-pool cluster of ``gpus`` the tenant's standing there, for a
    dedicated-nodes cluster the tenant's nodes on the host (any host of the region when
    None)."""
    if lock:
        repository.lock_quota(db, tenant.id, gpu_class.id, region)
    if gpus == 0:
        return
    if placement != DEDICATED:
        room = repository.standings(db, tenant.id, gpu_class.id,
                                    excluding=excluding).get(region, Standing())
        _refuse_beyond_quota(gpu_class, region, gpus, room, placement)
    elif host_cluster_id is not None:
        check_dedicated(db, tenant, gpu_class, gpus, host_cluster_id, excluding)


def check_dedicated(db: Session, tenant: Tenant, gpu_class: GpuClass, gpus: int,
                    host_cluster_id: int, excluding: int | None) -> None:
    on_nodes = repository.tenant_node_gpus(db, tenant.id, gpu_class.id,
                                           host_cluster_id=host_cluster_id).get(host_cluster_id, 0)
    held = repository.tenant_dedicated_held(db, tenant.id, gpu_class.id,
                                            excluding=excluding).get(host_cluster_id, 0)
    if gpus > on_nodes - held:
        raise _beyond_nodes(gpu_class, on_nodes - held, on_nodes)


def _beyond_nodes(gpu_class: GpuClass, free: int, on_nodes: int) -> ValidationFailed:
    return ValidationFailed.on_field(
        "gpus", f"{max(free, 0)} {gpu_class.display_name} GPUs are free on the nodes "
                f"dedicated to the tenant ({on_nodes} in all); ask a platform admin to "
                "assign nodes, or use the shared pool")
