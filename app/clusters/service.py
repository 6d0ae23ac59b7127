"""Virtual cluster requests: create, resize and delete within the tenant's GPU quota.

Quota rule (``app.accounting.standing``, the one accounting): the GPUs of a class on the
tenant's dedicated nodes and those its shared-pool clusters hold (those being deleted included,
as they still hold them) together never exceed the tenant's approved quota of that class in the
region. Creates and
resizes lock the tenant's quota rows of the class first (a create every region's, before it
knows its region; a resize its region's), then check and write, so parallel requests queue on
those rows and cannot both pass. Lock order is quota row, then cluster row,
the same as quota expiry, so the two never deadlock.

Dedicated-nodes clusters draw on the tenant's dedicated nodes instead: their GPUs of a class,
summed over the tenant's dedicated-nodes clusters on a host, stay within the GPUs on the nodes
of that class dedicated to the tenant there. Shared-pool clusters do not use dedicated nodes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.accounting import machine_pool
from app.accounting.standing import PRIVATE, Standing
from app.audit import readable
from app.audit import service as audit
from app.auth.principal import Principal
from app.authz.scoping import Action
from app.clusters import (
    checks,
    deletion,
    desired,
    limits,
    parts,
    power,
    repository,
    sleep_policy,
    template_upgrade,
)
from app.clusters.deletion import spec_of
from app.clusters.models import VirtualCluster
from app.clusters.placement import Placed
from app.clusters.presented import cluster_fields, gpu_wait, gpus_in_use
from app.clusters.schemas import (
    ClusterCreate,
    ClusterOut,
    ClusterPreview,
    ClusterResize,
    SleepPolicyIn,
)
from app.clusters.shapes import ResolvedCreate, TemplateResolver, TemplateUpgrade
from app.gpu_classes.models import GpuClass
from app.http.pagination import Page, PageParams
from app.kit.config import Settings
from app.kit.errors import Conflict, NotFound, ValidationFailed
from app.kube.helm import HelmInstaller
from app.kube.manifests import dump_yaml
from app.quotas import regions
from app.quotas.units import Ask
from app.tenants.access import tenant_for
from app.tenants.models import Tenant
from app.workqueue import CLUSTERS, PLATFORM_OBJECTS, TENANT_QUEUES, enqueue, tenant_queue_key


def cluster_for(db: Session, principal: Principal, slug: str, name: str,
                action: Action = "read") -> VirtualCluster:
    """The tenant's cluster by name, if the principal may ``action`` in the tenant; else 404."""
    tenant = tenant_for(db, principal, slug, action)
    cluster = repository.cluster_by_name(db, tenant.id, name)
    if cluster is None:
        raise NotFound(f"no cluster {name!r} in tenant {slug!r}")
    return cluster


def cluster_out(db: Session, cluster: VirtualCluster) -> ClusterOut:
    return cluster_outs(db, [cluster])[0]


def cluster_outs(db: Session, clusters: Sequence[VirtualCluster]) -> list[ClusterOut]:
    """One query for the GPU classes of a whole page, not one per row."""
    class_ids = sorted({c.gpu_class_id for c in clusters if c.gpu_class_id is not None})
    names = repository.class_names(db, class_ids) if class_ids else {}
    return [_cluster_out(db, c, names.get(c.gpu_class_id or 0, (None, None))) for c in clusters]


def _cluster_out(db: Session, cluster: VirtualCluster,
                 gpu_class: tuple[str | None, str | None]) -> ClusterOut:
    tenant = db.get(Tenant, cluster.tenant_id)
    host = repository.host_cluster(db, cluster.host_cluster_id)
    assert tenant is not None and host is not None
    wait = repository.gpu_wait(db, cluster.id)
    in_use = repository.gpus_in_use(db, cluster.id)
    fields = cluster_fields(
        cluster, tenant.slug, gpu_class, host.name, host.region,
        gpu_wait(wait.pods, wait.reason, wait.observed_at) if wait else None,
        gpus_in_use(in_use.guaranteed_gpus, in_use.burst_gpus, in_use.observed_at)
        if in_use else None)
    return ClusterOut.model_validate(_with_private_nodes(db, [fields])[0])


def _with_private_nodes(db: Session, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each private-nodes cluster's machines, in one statement for a page (none for a page
    without such a cluster)."""
    ids = [item["id"] for item in items if item["placement"] == PRIVATE]
    serving = machine_pool.serving(db, ids) if ids else {}
    for item in items:
        item["private_nodes"] = [
            {"machine": m.name, "gpus": m.gpus, "phase": m.phase, "node": m.node_name,
             "leaving": m.leaving} for m in serving.get(item["id"], [])]
    return items


def record_gpu_waits(db: Session, waits: Mapping[int, tuple[int, str]],
                     observed_at: datetime) -> None:
    """What the worker saw on a host: by cluster id, its GPU pods waiting and KAI's reason."""
    repository.record_gpu_waits(db, waits, observed_at)


def record_gpus_in_use(db: Session, in_use: Mapping[int, tuple[float, float] | None],
                       observed_at: datetime) -> None:
    """What the worker saw on a host: by cluster id, the guaranteed and burst GPUs KAI
    allocated to its leaf queue; None for a cluster without a queue (its figures go)."""
    repository.record_gpus_in_use(db, in_use, observed_at)



def list_clusters(db: Session, principal: Principal, slug: str,
                  params: PageParams) -> Page[ClusterOut]:
    items, cursor = list_cluster_fields(db, principal, slug, params)
    return Page(items=[ClusterOut.model_validate(item) for item in items], next_cursor=cursor)


def list_cluster_fields(db: Session, principal: Principal, slug: str,
                        params: PageParams) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the tenant's clusters as ``ClusterOut`` fields, read as plain columns."""
    tenant = tenant_for(db, principal, slug)
    rows, cursor = repository.listed_page(db, tenant.id, params)
    return _with_private_nodes(db, [
        cluster_fields(row, tenant.slug, (row.product, row.gpu_class_name), row.host_name,
                       row.host_region,
                       gpu_wait(row.wait_pods, row.wait_reason, row.wait_observed_at),
                       gpus_in_use(row.in_use_guaranteed, row.in_use_burst,
                                   row.in_use_observed_at))
        for row in rows]), cursor


def get_cluster(db: Session, principal: Principal, slug: str, name: str) -> ClusterOut:
    return cluster_out(db, cluster_for(db, principal, slug, name))


def condition_history(db: Session, cluster: ClusterOut) -> list[dict[str, Any]]:
    """The kept condition transitions of a cluster the caller was shown (``get_cluster``),
    oldest first."""
    return [{"type": t.type, "status": t.status, "reason": t.reason, "message": t.message,
             "at": t.at} for t in repository.condition_transitions(db, cluster.id)]


def cluster_version(db: Session, principal: Principal, slug: str, name: str) -> str:
    """Moves whenever the cluster page's status would: the live stream's fingerprint."""
    cluster = cluster_for(db, principal, slug, name)
    wait = repository.gpu_wait(db, cluster.id)
    in_use = repository.gpus_in_use(db, cluster.id)
    shown = [cluster.conditions or [], [wait.pods, wait.reason] if wait else None,
             [in_use.guaranteed_gpus, in_use.burst_gpus] if in_use else None]
    status = json.dumps(shown, sort_keys=True).encode()
    return "-".join((str(cluster.generation), str(cluster.observed_generation),
                     "deleting" if cluster.deletion_requested_at else "live",
                     hashlib.sha256(status).hexdigest()[:16]))


# ----- create


def _spec(cluster: VirtualCluster) -> dict[str, Any]:
    """The cluster's spec for its audit entries, with the unit of a cluster of slices or a
    share (a whole-GPU cluster's entries as they always were)."""
    return {**spec_of(cluster), **parts.unit_audit(cluster)}


def tenant_to_create_in(db: Session, principal: Principal, slug: str) -> Tenant:
    """The tenant, if the caller may create clusters there: checked before any form feedback."""
    return tenant_for(db, principal, slug, "manage")


@dataclass(frozen=True)
class CreateChecked:
    """What a create passed its checks with."""

    tenant: Tenant
    resolved: ResolvedCreate | None
    placed: Placed
    gpu_class: GpuClass | None
    part: Ask | None = None  # slices of a MIG profile or a share of one GPU (issue 61)


def check_create(
    db: Session, principal: Principal, settings: Settings, slug: str, payload: ClusterCreate,
    *, lock: bool = False, resolver: TemplateResolver | None = None,
) -> CreateChecked:
    """Everything ``create_cluster`` checks, and the host placement picks; without ``lock`` it
    writes and locks nothing.

    With a resolver, the payload is first made concrete by its template (which refuses a value
    the template fixes); the checks below then run on the concrete request.
    """
    tenant = tenant_to_create_in(db, principal, slug)
    resolved = resolver.resolve(db, payload) if resolver is not None else None
    if resolved is not None:
        payload = resolved.payload
    checks.check_version(settings, payload.kubernetes_version)
    limits.ensure_room_for_a_cluster(db, settings, tenant, payload, lock=lock)
    if repository.name_taken(db, tenant.id, payload.name):
        raise _name_taken(payload.name)
    gpu_class = checks.gpu_class_of(db, payload.gpu_class_id, payload.gpus)
    part = parts.part_of(payload)
    if part is not None:
        gpu_class = parts.checked_class(gpu_class, payload, part)
    checks.check_spec(db, settings, tenant, payload, gpu_class, _unit_columns(part))
    hardened = desired.hardening(settings, resolved.pod_security if resolved else None,
                                 resolved.user_namespaces if resolved else False)
    if part is not None and gpu_class is not None:
        placed = parts.place(db, settings, tenant, payload, gpu_class, hardened, part, lock=lock)
        return CreateChecked(tenant, resolved, placed, gpu_class, part)
    rooms = repository.standings(db, tenant.id, gpu_class.id, lock=lock) if gpu_class else {}
    placed = checks.place(db, settings, tenant, payload, gpu_class, hardened, rooms)
    if gpu_class is not None:
        checks.check_placed(db, tenant, gpu_class, payload, placed, rooms)
    return CreateChecked(tenant, resolved, placed, gpu_class)


def _unit_columns(part: Ask | None) -> dict[str, object]:
    """A cluster row's columns for the slices or share it holds (none for whole GPUs)."""
    if part is None:
        return {}
    return {"unit": part.unit.kind, "mig_profile": part.unit.profile, "amount": part.amount}


def region_choices(db: Session) -> list[str]:
    """The regions a create form offers (none to pick while there is only one)."""
    return [region for region in regions.fleet_regions(db) if region]


def create_cluster(db: Session, principal: Principal, settings: Settings, slug: str,
                   payload: ClusterCreate,
                   resolver: TemplateResolver | None = None) -> ClusterOut:
    checked = check_create(db, principal, settings, slug, payload, lock=True, resolver=resolver)
    tenant, resolved, placed, gpu_class = (checked.tenant, checked.resolved, checked.placed,
                                           checked.gpu_class)
    unit = _unit_columns(checked.part)
    if resolved is not None:
        payload = resolved.payload
    # The create's first write: the checks before it read and lock only.
    cluster = repository.add_cluster(db, dict(
        tenant_id=tenant.id, host_cluster_id=placed.host_id, placement_reason=placed.reason,
        name=payload.name,
        kubernetes_version=payload.kubernetes_version or settings.kubernetes_versions[0],
        placement=payload.placement, gpu_class_id=payload.gpu_class_id, gpus=payload.gpus,
        cpu_millicores=payload.cpu_millicores, memory_mib=payload.memory_mib, generation=1,
        observed_generation=0, conditions=[],
        endpoint=desired.endpoint_for(settings, tenant.slug, payload.name),
        created_by_id=principal.user_id,
        template_version_id=resolved.template_version_id if resolved else None,
        pod_security=resolved.pod_security if resolved else None,
        user_namespaces=resolved.user_namespaces if resolved else False,
        addons=[a.as_json() for a in resolved.addons] if resolved else [],
        **(resolved.sleep_policy if resolved else {}), **unit,
    ), _name_taken(payload.name))
    # Its queue hangs from its tenant's, under the host's root queue: their kinds make them,
    # due first, so that a worker has them by the time it looks at the cluster.
    enqueue(db, TENANT_QUEUES, tenant_queue_key(tenant.id, cluster.host_cluster_id))
    enqueue(db, PLATFORM_OBJECTS, cluster.host_cluster_id)
    enqueue(db, CLUSTERS, cluster.id)
    _record(db, principal, "virtual_cluster.create", cluster, None,
            {**_spec(cluster), "gpu_class": gpu_class.display_name if gpu_class else None,
             "host_cluster": placed.host_name, "region": placed.region,
             "placement_reason": placed.reason, **_sleep_policy_given(resolved)})
    # New: the worker has neither seen it wait for GPUs nor read its queue.
    return ClusterOut.model_validate(cluster_fields(
        cluster, tenant.slug, (gpu_class.product, gpu_class.display_name) if gpu_class
        else (None, None), placed.host_name, placed.region, None, None))


def _sleep_policy_given(resolved: ResolvedCreate | None) -> dict[str, Any]:
    """The template's sleep policy defaults, for the create's audit event (none: nothing)."""
    return {"sleep_policy": resolved.sleep_policy} if resolved and resolved.sleep_policy else {}


def _name_taken(name: str) -> Conflict:
    return Conflict(f"the tenant has a cluster named {name!r} already",
                    errors=[{"field": "name", "message": "this name is taken"}])


# ----- resize and delete


def resize_cluster(db: Session, principal: Principal, slug: str, name: str,
                   payload: ClusterResize) -> ClusterOut:
    tenant = tenant_for(db, principal, slug, "manage")
    found = cluster_for(db, principal, slug, name, "manage")
    gpu_class = db.get(GpuClass, found.gpu_class_id) if found.gpu_class_id else None
    region = _region_of(db, found)
    if gpu_class is not None:
        repository.lock_quota(db, tenant.id, gpu_class.id, region)
    cluster = repository.lock_cluster(db, found.id)
    if cluster is None:
        raise NotFound(f"no cluster {name!r} in tenant {slug!r}")
    if cluster.deletion_requested_at is not None:
        raise Conflict(f"cluster {name!r} is being deleted")
    new_amount = parts.resized_amount(cluster, payload)
    sizes = payload.model_dump(exclude_none=True, exclude={"slices", "gpu_share"})
    wanted = {k: v for k, v in sizes.items() if getattr(cluster, k) != v}
    if new_amount is not None and new_amount != cluster.amount:
        wanted["amount"] = new_amount
    if not wanted:
        return cluster_out(db, cluster)
    limits.refuse_empty({**_spec(cluster), **wanted})
    if cluster.placement == "private-nodes" and "gpus" in wanted:
        raise ValidationFailed.on_field(
            "gpus", "a private-nodes cluster keeps the machines it was made with (this "
                    "version): create another cluster for more GPUs, or delete this one to "
                    "give its machines back")
    if gpu_class is not None and wanted.get("amount", 0) > cluster.amount:
        parts.check_growth(db, tenant, gpu_class, region, cluster, wanted["amount"])
    new_gpus = wanted.get("gpus", cluster.gpus)
    if gpu_class is None and new_gpus > 0:
        raise ValidationFailed.on_field(
            "gpus", "this cluster was created without a GPU class; create one with GPUs")
    if gpu_class is not None and new_gpus > cluster.gpus:
        checks.check_quota(db, tenant, gpu_class, region, cluster.placement, new_gpus,
                           lock=False, host_cluster_id=cluster.host_cluster_id,
                           excluding=cluster.id)
    before = _spec(cluster)
    for key, value in wanted.items():
        setattr(cluster, key, value)
    cluster.generation += 1
    enqueue(db, CLUSTERS, cluster.id)
    db.flush()
    _record(db, principal, "virtual_cluster.resize", cluster, before, _spec(cluster))
    if gpu_class is not None:
        _clear_over_quota(db, principal, tenant, gpu_class, region)
    return cluster_out(db, cluster)


def _region_of(db: Session, cluster: VirtualCluster) -> str:
    host = repository.host_cluster(db, cluster.host_cluster_id)
    return host.region if host is not None else ""


def _clear_over_quota(db: Session, principal: Principal, tenant: Tenant,
                      gpu_class: GpuClass, region: str) -> None:
    """Clusters flagged by quota expiry are back within quota once the tenant has shrunk."""
    if repository.standings(db, tenant.id, gpu_class.id).get(region, Standing()).over > 0:
        return
    for flagged in repository.over_quota_clusters(db, tenant.id, gpu_class.id, region):
        flagged.over_quota = False
        _record(db, principal, "virtual_cluster.within_quota", flagged, {"over_quota": True},
                {"over_quota": False})
    db.flush()


def delete_cluster(db: Session, principal: Principal, slug: str, name: str) -> ClusterOut:
    """Asks the worker to take the cluster down; the row goes once everything is removed."""
    found = cluster_for(db, principal, slug, name, "manage")
    cluster = repository.lock_cluster(db, found.id)
    if cluster is None:
        raise NotFound(f"no cluster {name!r} in tenant {slug!r}")
    deletion.request_deletion(db, cluster, _spec(cluster), actor_id=principal.user_id,
                              actor_label=principal.label)
    return cluster_out(db, cluster)


# ----- sleep and wake


def change_power(db: Session, principal: Principal, slug: str, name: str,
                 wanted: str) -> ClusterOut:
    """A tenant admin puts the cluster to sleep or wakes it (asking twice changes nothing)."""
    found = cluster_for(db, principal, slug, name, "manage")
    cluster = power.locked(db, found)
    power.request(db, cluster, wanted, "manual", actor_id=principal.user_id,
                  actor_label=principal.label)
    return cluster_out(db, cluster)


def change_sleep_policy(db: Session, principal: Principal, slug: str, name: str,
                        payload: SleepPolicyIn) -> ClusterOut:
    """A tenant admin sets the cluster's sleep policy (audited; the same again changes
    nothing)."""
    found = cluster_for(db, principal, slug, name, "manage")
    return cluster_out(db, sleep_policy.change_policy(db, principal, found, payload))


def sleep_policy_sleeps_at_once(db: Session, principal: Principal, slug: str, name: str,
                                payload: SleepPolicyIn, now: datetime) -> bool:
    """Whether saving ``payload`` would put the cluster to sleep at once (its schedule's
    window holds now): the page says so before saving."""
    found = cluster_for(db, principal, slug, name, "manage")
    return sleep_policy.sleeps_at_once(found, payload, now)


def wake_for_use(db: Session, principal: Principal, cluster: VirtualCluster) -> bool:
    """Someone who may use the cluster asked for a kubeconfig: a sleeping cluster wakes."""
    if cluster.power != power.ASLEEP:
        return False
    row = power.locked(db, cluster)
    return power.request(db, row, power.AWAKE, "kubeconfig", actor_id=principal.user_id,
                         actor_label=principal.label)


# ----- template upgrade


def upgrade_template(db: Session, principal: Principal, settings: Settings, slug: str,
                     name: str, upgrade: TemplateUpgrade) -> ClusterOut:
    """Move the cluster to another template version; the reconciler applies the new generation.

    Placement and GPU class hold quota and nodes: a version that changes them needs a new
    cluster, not an upgrade.
    """
    found = cluster_for(db, principal, slug, name, "manage")
    cluster = repository.lock_cluster(db, found.id)
    if cluster is None:
        raise NotFound(f"no cluster {name!r} in tenant {slug!r}")
    if cluster.deletion_requested_at is not None:
        raise Conflict(f"cluster {name!r} is being deleted")
    template_upgrade.check(db, settings, cluster, upgrade)
    before = _spec(cluster)
    if upgrade.kubernetes_version is not None:
        cluster.kubernetes_version = upgrade.kubernetes_version
    cluster.template_version_id = upgrade.template_version_id
    cluster.pod_security = upgrade.pod_security
    cluster.user_namespaces = upgrade.user_namespaces
    cluster.addons = [a.as_json() for a in upgrade.addons]
    cluster.generation += 1
    enqueue(db, CLUSTERS, cluster.id)
    db.flush()
    _record(db, principal, "virtual_cluster.template_upgrade", cluster, before,
            {**_spec(cluster), "template": upgrade.label})
    return cluster_out(db, cluster)




def preview(db: Session, principal: Principal, settings: Settings, slug: str,
            name: str) -> ClusterPreview:
    cluster = cluster_for(db, principal, slug, name)
    wanted = desired.load(db, cluster, settings)
    objects = wanted.host_objects()
    shown = settings.model_copy(update={"kubeconfig": _kubeconfig_placeholder(db, cluster,
                                                                              settings)})
    command = HelmInstaller.from_settings(shown).install_command(
        wanted.release, wanted.namespace, "vcluster.yaml")
    return ClusterPreview(
        namespace=wanted.namespace, release=wanted.release, objects=objects,
        objects_yaml="---\n".join(dump_yaml(obj) for obj in objects),
        values_yaml=wanted.values_yaml(), helm_command=command,
    )


def _kubeconfig_placeholder(db: Session, cluster: VirtualCluster,
                            settings: Settings) -> str | None:
    """What the review's helm command names for ``--kubeconfig``: the host the cluster is on,
    never where the operator keeps its credentials; None where helm runs in the host itself
    (the environment's host reached with in-cluster config)."""
    host = repository.host_cluster(db, cluster.host_cluster_id)
    if host is None:
        return None
    if host.credential_kind == "env" and not settings.kubeconfig:
        return None
    return f"<kubeconfig of host {host.name}>"


def _record(db: Session, principal: Principal, action: str, cluster: VirtualCluster,
            before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    audit.record(db, action=action, actor_id=principal.user_id, actor_label=principal.label,
                 tenant_id=cluster.tenant_id, target_type="virtual_cluster",
                 target_id=cluster.id, target_label=readable.cluster_label(cluster.name),
                 before=before, after=after)
