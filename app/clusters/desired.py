"""The desired state of one virtual cluster, read from the database for the pure builders."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.clusters import repository
from app.clusters.models import VirtualCluster
from app.clusters.shapes import ClusterAddon
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kube import manifests
from app.kube.manifests import ClusterSpec, GpuGrant, ManifestPolicy, TenantSpec, team_queues
from app.kube.manifests.queues import cluster_gpu_limit
from app.kube.manifests.specs import Placement
from app.kube.manifests.units import GpuUnit, kai_gpus, mib_to_mb
from app.quotas.burst import Burst, tenant_burst
from app.tenants.models import Tenant

CHART = "vcluster"
WHOLE = "gpu"  # the unit of whole GPUs, as the ``unit`` columns store it
# The chart (in any repository) that installs KAI Scheduler.
KAI_CHART = "kai-scheduler"


@dataclass(frozen=True)
class DesiredCluster:
    cluster_id: int
    tenant_id: int
    generation: int
    deleting: bool
    conditions: list[dict[str, Any]]
    sealed_kubeconfig: str | None
    spec: ClusterSpec
    tenant: TenantSpec
    policy: ManifestPolicy
    addons: tuple[ClusterAddon, ...] = field(default=())
    # Asleep is wanted; slept: the worker put it to sleep (its Asleep condition is True).
    asleep: bool = False
    slept: bool = False
    power_reason: str = ""
    asleep_since: datetime | None = None
    # The tenant's teams (app.kube.manifests.team_queues): KAI queues inside the cluster.
    teams: tuple[str, ...] = field(default=())
    # The row's placement (as ``spec.placement``), host and GPU class: a private-nodes
    # cluster's machines are of that class on that host.
    placement: str = ""
    host_id: int = 0
    gpu_class_id: int | None = None

    @property
    def namespace(self) -> str:
        return manifests.host_namespace_name(self.spec.tenant, self.spec.name)

    @property
    def release(self) -> str:
        return manifests.release_name(self.spec.name)

    @property
    def kubeconfig_secret(self) -> str:
        return manifests.kubeconfig_secret_name(self.release)

    def host_objects(self) -> list[dict[str, Any]]:
        """What the cluster needs on its host, the root and tenant queues included."""
        return manifests.cluster_host_objects(self.spec, self.tenant, self.policy)

    def own_objects(self) -> list[dict[str, Any]]:
        """What its reconcile writes: the objects of this cluster alone."""
        return manifests.cluster_own_objects(self.spec, self.policy)

    def values_yaml(self) -> str:
        return manifests.vcluster_values_yaml(self.spec, self.policy)

    @property
    def kai_addon(self) -> ClusterAddon | None:
        """KAI Scheduler installed inside a dedicated-nodes cluster: it gets team queues."""
        if self.spec.placement != "dedicated-nodes":
            return None
        return next((a for a in self.addons if a.chart == KAI_CHART), None)

    def team_queues(self) -> list[dict[str, Any]]:
        return team_queues.team_queues(self.spec, self.teams)


def endpoint_for(settings: Settings, tenant: str, cluster: str) -> str:
    return settings.cluster_endpoint_template.format(tenant=tenant, cluster=cluster)


def release_digest(desired: DesiredCluster, settings: Settings) -> str:
    """Changes whenever ``helm upgrade`` would install something different."""
    parts = [settings.vcluster_chart_repo, settings.vcluster_chart_version, desired.namespace,
             desired.release, desired.values_yaml()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def addon_digest(addon: ClusterAddon) -> str:
    """Changes whenever ``helm upgrade`` would install the add-on differently."""
    return hashlib.sha256(json.dumps(addon.as_json(), sort_keys=True).encode()).hexdigest()[:16]


def cluster_spec(cluster: VirtualCluster, tenant_slug: str, gpu_class: GpuClass | None,
                 settings: Settings) -> ClusterSpec:
    unit = _gpu_unit(cluster.unit)
    return ClusterSpec(
        tenant=tenant_slug, name=cluster.name, kubernetes_version=cluster.kubernetes_version,
        placement=_placement(cluster.placement),
        gpu_class=gpu_class.product if gpu_class else None, gpus=cluster.gpus,
        cpu_millicores=cluster.cpu_millicores, memory_mib=cluster.memory_mib,
        endpoint=cluster.endpoint or endpoint_for(settings, tenant_slug, cluster.name),
        pod_security=effective_pod_security(settings, cluster.pod_security),
        user_namespaces=bool(cluster.user_namespaces),
        # Whole GPUs are ``gpus`` (the spec takes its amount from them: a row not yet flushed
        # has no amount); slices and shares are ``amount`` of the row's unit.
        gpu_unit=unit, mig_profile=cluster.mig_profile or "",
        amount=None if unit == "gpu" else cluster.amount,
    )


_GPU_UNITS: dict[str, GpuUnit] = {"mig": "mig", "share": "share"}


def _gpu_unit(stored: str | None) -> GpuUnit:
    """The row's unit (None on a row not yet flushed: whole GPUs, the column's default)."""
    return _GPU_UNITS.get(stored or "gpu", "gpu")


_PLACEMENTS: dict[str, Placement] = {"dedicated-nodes": "dedicated-nodes",
                                      "private-nodes": "private-nodes"}


def _placement(stored: str) -> Placement:
    return _PLACEMENTS.get(stored, "shared-pool")


def effective_pod_security(settings: Settings,
                           pod_security: str | None) -> Literal["restricted", "baseline"]:
    """The cluster's own level (its template's), else the operator's PORTAL_POD_SECURITY."""
    return "baseline" if (pod_security or settings.pod_security) == "baseline" else "restricted"


def hardening(settings: Settings, pod_security: str | None, user_namespaces: bool) -> str | None:
    """What the admission webhook does to the cluster's pods (None: nothing)."""
    return manifests.hardening_level(effective_pod_security(settings, pod_security),
                                     user_namespaces)


def manifest_policy(settings: Settings) -> ManifestPolicy:
    return ManifestPolicy(vcluster_edition=settings.vcluster_edition,
                          control_plane_node_selector=settings.control_plane_node_selector)


@dataclass(frozen=True)
class TenantFacts:
    """What a tenant's queue on one host derives from, as read from the database."""

    slug: str
    display_name: str
    # GPU class product -> what the shared pool of the host's region guarantees the tenant.
    guarantees: dict[str, int]
    cpu_millicores: int
    memory_mib: int
    burst: Burst
    asleep_gpus: int
    # Its guarantees in MIG slices and GPU shares there, and KAI's count of what its clusters
    # asleep on the host hold of them (given back like their whole GPUs).
    grants: tuple[GpuGrant, ...] = ()
    asleep_grants: Decimal = Decimal(0)


@dataclass(frozen=True)
class ClusterFacts:
    """What one cluster's desired state derives from, as read from the database."""

    cluster: VirtualCluster
    tenant: TenantFacts
    gpu_class: GpuClass | None
    addons: tuple[ClusterAddon, ...]
    # (IdP group, role) of the tenant, read only for a dedicated-nodes cluster with KAI inside.
    groups: tuple[tuple[str, str], ...] | None


def read_tenant(db: Session, tenant: Tenant, region: str, host_id: int) -> TenantFacts:
    """The tenant's parent queue on a host gets the shared pool's guarantee to it of every
    class in the host's region (``Standing.shared_guarantee``: its approved quota less its
    dedicated GPUs), less the GPUs of its clusters asleep there; its MIG slices and GPU shares
    likewise, per unit, which the queue counts in KAI's units (``GpuGrant``)."""
    quotas = repository.tenant_quotas(db, tenant.id, region)
    guarantees = repository.shared_guarantees(db, tenant.id, region)
    parts = {key: amount for key, amount in guarantees.items() if key[1] != WHOLE and amount}
    products = repository.class_products(
        db, sorted({q.gpu_class_id for q in quotas} | {class_id for class_id, _, _ in parts}))
    asleep = repository.asleep_held(db, tenant.id, host_id)
    return TenantFacts(
        slug=tenant.slug, display_name=tenant.display_name,
        guarantees={products[q.gpu_class_id]: guarantees.get((q.gpu_class_id, WHOLE, ""), 0)
                    for q in quotas if q.unit == WHOLE},
        cpu_millicores=sum(q.cpu_millicores for q in quotas),
        memory_mib=sum(q.memory_mib for q in quotas), burst=tenant_burst(db, tenant.id),
        asleep_gpus=sum(held for (unit, _), held in asleep.items() if unit == WHOLE),
        grants=tuple(GpuGrant(products[class_id], _gpu_unit(unit), profile, amount)
                     for (class_id, unit, profile), amount in parts.items()),
        asleep_grants=sum((kai_gpus(unit, held, profile)
                           for (unit, profile), held in asleep.items() if unit != WHOLE),
                          Decimal(0)))


def read_cluster(db: Session, cluster: VirtualCluster) -> ClusterFacts:
    tenant = db.get(Tenant, cluster.tenant_id)
    assert tenant is not None
    gpu_class = db.get(GpuClass, cluster.gpu_class_id) if cluster.gpu_class_id else None
    addons = tuple(ClusterAddon.of_json(a) for a in cluster.addons or [])
    # Only a dedicated-nodes cluster with KAI inside has team queues: the others skip the query.
    kai_inside = cluster.placement == "dedicated-nodes" and any(
        a.chart == KAI_CHART for a in addons)
    groups = tuple(repository.group_roles(db, tenant.id)) if kai_inside else None
    host = repository.host_cluster(db, cluster.host_cluster_id)
    assert host is not None
    return ClusterFacts(cluster=cluster, tenant=read_tenant(db, tenant, host.region, host.id),
                        gpu_class=gpu_class, addons=addons, groups=groups)


def tenant_spec(facts: TenantFacts) -> TenantSpec:
    burst = facts.burst
    return TenantSpec(
        slug=facts.slug, display_name=facts.display_name, gpu_quota=dict(facts.guarantees),
        cpu_millicores=facts.cpu_millicores, memory_mb=mib_to_mb(facts.memory_mib),
        burst_gpus=None if burst.burst_gpus == manifests.UNLIMITED_GPUS else burst.burst_gpus,
        over_quota_weight=burst.over_quota_weight,
        reclaim_min_runtime_s=burst.reclaim_min_runtime_s,
        preempt_min_runtime_s=burst.preempt_min_runtime_s, asleep_gpus=facts.asleep_gpus,
        gpu_grants=facts.grants, asleep_grants=facts.asleep_grants)


def build(facts: ClusterFacts, settings: Settings) -> DesiredCluster:
    """The cluster's desired state from what was read: pure."""
    cluster = facts.cluster
    tenant_wanted = tenant_spec(facts.tenant)
    spec = cluster_spec(cluster, facts.tenant.slug, facts.gpu_class, settings)
    spec = replace(spec, gpu_limit=cluster_gpu_limit(tenant_wanted, spec.gpus, spec.placement,
                                                     spec.gpu_unit),
                   asleep=cluster.power == "asleep")
    conditions = list(cluster.conditions or [])
    teams = () if facts.groups is None else tuple(team_queues.teams(facts.groups))
    return DesiredCluster(
        cluster_id=cluster.id, tenant_id=cluster.tenant_id, generation=cluster.generation,
        deleting=cluster.deletion_requested_at is not None, conditions=conditions,
        sealed_kubeconfig=cluster.admin_kubeconfig_encrypted,
        spec=spec, tenant=tenant_wanted, policy=manifest_policy(settings),
        addons=facts.addons, teams=teams,
        asleep=cluster.power == "asleep", slept=cond.is_true(conditions, cond.ASLEEP),
        power_reason=cluster.power_reason, asleep_since=cluster.asleep_since,
        placement=cluster.placement, host_id=cluster.host_cluster_id,
        gpu_class_id=cluster.gpu_class_id,
    )


def load(db: Session, cluster: VirtualCluster, settings: Settings) -> DesiredCluster:
    return build(read_cluster(db, cluster), settings)


@dataclass(frozen=True)
class DesiredTenantQueue:
    """A tenant's KAI queue on one host, which its clusters' queues hang from."""

    slug: str
    # None: the tenant has no cluster on the host any more, and its queue goes.
    queue: dict[str, Any] | None


def load_tenant_queue(db: Session, tenant_id: int, host_id: int,
                      settings: Settings) -> DesiredTenantQueue | None:
    """None when the tenant or the host is gone."""
    tenant = db.get(Tenant, tenant_id)
    host = repository.host_cluster(db, host_id)
    if tenant is None or host is None:
        return None
    if not repository.has_clusters_on(db, tenant_id, host_id):
        return DesiredTenantQueue(tenant.slug, None)
    facts = read_tenant(db, tenant, host.region, host.id)
    return DesiredTenantQueue(tenant.slug, manifests.tenant_queue(tenant_spec(facts),
                                                                  manifest_policy(settings)))
