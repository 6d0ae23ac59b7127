"""The desired state of one virtual cluster, read from the database for the pure builders."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.clusters import repository
from app.clusters.models import VirtualCluster
from app.clusters.shapes import ClusterAddon
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kube import manifests
from app.kube.manifests import ClusterSpec, ManifestPolicy, TenantSpec, team_queues
from app.kube.manifests.queues import cluster_gpu_limit
from app.kube.manifests.units import mib_to_mb
from app.quotas.burst import tenant_burst
from app.tenants.models import Tenant

CHART = "vcluster"
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
    last_of_tenant: bool
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
        return manifests.cluster_host_objects(self.spec, self.tenant, self.policy)

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


def cluster_spec(cluster: VirtualCluster, tenant: Tenant, gpu_class: GpuClass | None,
                 settings: Settings) -> ClusterSpec:
    return ClusterSpec(
        tenant=tenant.slug, name=cluster.name, kubernetes_version=cluster.kubernetes_version,
        placement="dedicated-nodes" if cluster.placement == "dedicated-nodes" else "shared-pool",
        gpu_class=gpu_class.product if gpu_class else None, gpus=cluster.gpus,
        cpu_millicores=cluster.cpu_millicores, memory_mib=cluster.memory_mib,
        endpoint=cluster.endpoint or endpoint_for(settings, tenant.slug, cluster.name),
        pod_security=effective_pod_security(settings, cluster.pod_security),
        user_namespaces=bool(cluster.user_namespaces),
    )


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


def tenant_spec(db: Session, tenant: Tenant, region: str, host_id: int) -> TenantSpec:
    """The tenant's parent queue on a host gets the shared pool's guarantee to it of every
    class in the host's region (``Standing.shared_guarantee``: its approved quota less its
    dedicated GPUs), less the GPUs of its clusters asleep there."""
    quotas = repository.tenant_quotas(db, tenant.id, region)
    guarantees = repository.shared_guarantees(db, tenant.id, region)
    products = repository.class_products(db, [q.gpu_class_id for q in quotas])
    burst = tenant_burst(db, tenant.id)
    return TenantSpec(
        slug=tenant.slug, display_name=tenant.display_name,
        gpu_quota={products[q.gpu_class_id]: guarantees.get(q.gpu_class_id, 0) for q in quotas},
        cpu_millicores=sum(q.cpu_millicores for q in quotas),
        memory_mb=mib_to_mb(sum(q.memory_mib for q in quotas)),
        burst_gpus=None if burst.burst_gpus == manifests.UNLIMITED_GPUS else burst.burst_gpus,
        over_quota_weight=burst.over_quota_weight,
        reclaim_min_runtime_s=burst.reclaim_min_runtime_s,
        preempt_min_runtime_s=burst.preempt_min_runtime_s,
        asleep_gpus=repository.asleep_gpus(db, tenant.id, host_id),
    )


def load(db: Session, cluster: VirtualCluster, settings: Settings) -> DesiredCluster:
    tenant = db.get(Tenant, cluster.tenant_id)
    assert tenant is not None
    gpu_class = db.get(GpuClass, cluster.gpu_class_id) if cluster.gpu_class_id else None
    addons = tuple(ClusterAddon.of_json(a) for a in cluster.addons or [])
    # Only a dedicated-nodes cluster with KAI inside has team queues: the others skip the query.
    kai_inside = cluster.placement == "dedicated-nodes" and any(
        a.chart == KAI_CHART for a in addons)
    teams = team_queues.teams(repository.group_roles(db, tenant.id)) if kai_inside else []
    host = repository.host_cluster(db, cluster.host_cluster_id)
    assert host is not None
    tenant_wanted = tenant_spec(db, tenant, host.region, host.id)
    spec = cluster_spec(cluster, tenant, gpu_class, settings)
    spec = replace(spec, gpu_limit=cluster_gpu_limit(tenant_wanted, spec.gpus, spec.placement),
                   asleep=cluster.power == "asleep")
    return DesiredCluster(
        cluster_id=cluster.id, tenant_id=tenant.id, generation=cluster.generation,
        deleting=cluster.deletion_requested_at is not None,
        conditions=list(cluster.conditions or []),
        sealed_kubeconfig=cluster.admin_kubeconfig_encrypted,
        last_of_tenant=not repository.other_clusters_exist(db, tenant.id, cluster.id,
                                                           cluster.host_cluster_id),
        spec=spec, tenant=tenant_wanted, policy=manifest_policy(settings),
        addons=addons, teams=tuple(teams), asleep=cluster.power == "asleep",
        slept=cond.is_true(list(cluster.conditions or []), cond.ASLEEP),
        power_reason=cluster.power_reason, asleep_since=cluster.asleep_since,
    )
