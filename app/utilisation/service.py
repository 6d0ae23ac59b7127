"""GPU utilisation per cluster and tenant, and the idle GPUs, read through the authz scoping
helpers; Prometheus absent, down or slow makes every figure unknown (None), never zero."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.authz.scoping import ensure_platform_admin
from app.clusters.service import cluster_for
from app.kit.config import Settings
from app.telemetry.prometheus import Prometheus, Unavailable
from app.tenants.access import tenant_for
from app.utilisation import repository
from app.utilisation.mapping import (
    NAMESPACE_LABELS,
    NODE_LABELS,
    Gpu,
    Owner,
    Ownership,
    figures,
    gpu_key,
    gpus_of,
    holder_of,
    mean_over_time,
)
from app.utilisation.schemas import (
    ClusterUtilisationOut,
    IdleGpuOut,
    IdleGpusOut,
    TenantClusterUtilisation,
    TenantUtilisationOut,
    UtilisationOut,
    UtilisationPoint,
)

UTILISATION = "DCGM_FI_DEV_GPU_UTIL"
FRAMEBUFFER_USED = "DCGM_FI_DEV_FB_USED"
HISTORY = timedelta(days=1)
HISTORY_STEP_SECONDS = 15 * 60


def idle_window_query(minutes: int) -> str:
    """Each GPU's highest utilisation over the window, of the series (the same GPU, pod and
    labels) that already existed at the window's start: a pod bound a minute ago is not idle
    past the window, however still its GPU."""
    return f"max_over_time({UTILISATION}[{minutes}m]) and {UTILISATION} offset {minutes}m"


@dataclass(frozen=True)
class Reading:
    """The owned GPUs now, as one moment's queries saw them."""

    gpus: list[Gpu]
    ownership: Ownership
    observed_at: datetime
    prometheus: Prometheus


def read(db: Session, settings: Settings, now: datetime | None = None) -> Reading:
    """Every owned GPU now: utilisation, framebuffer and the idle window's peak; raises
    ``Unavailable`` when Prometheus cannot say."""
    return read_owned(repository.ownership(db), settings, now)


def read_owned(ownership: Ownership, settings: Settings, now: datetime | None = None) -> Reading:
    """``read`` with the ownership already read: Prometheus only, no database, so a caller can
    end its transaction first (no HTTP while it holds a connection)."""
    prometheus = Prometheus(settings.prometheus_url, settings.prometheus_timeout_seconds)
    at = now or datetime.now(UTC)
    samples = prometheus.instant(UTILISATION, at)
    used = {gpu_key(s.labels): s.value for s in prometheus.instant(FRAMEBUFFER_USED, at)}
    holders = {gpu_key(s.labels): holder_of(s.labels) for s in samples}
    peaks: dict[str, float] = {}
    for sample in prometheus.instant(idle_window_query(settings.idle_gpu_window_minutes), at):
        key = gpu_key(sample.labels)
        if holders.get(key) != holder_of(sample.labels):
            # The GPU's series of an earlier holder, or of no pod: not the window of this one.
            continue
        peaks[key] = max(sample.value, peaks.get(key, sample.value))
    gpus = gpus_of(((s.labels, s.value) for s in samples), ownership, used, peaks)
    return Reading(gpus, ownership, at, prometheus)


def _rule(settings: Settings) -> dict[str, Any]:
    return {"idle_threshold_percent": settings.idle_gpu_utilisation_percent,
            "idle_window_minutes": settings.idle_gpu_window_minutes}


def _known(gpus: list[Gpu], settings: Settings, at: datetime) -> dict[str, Any]:
    shown = figures(gpus, settings.idle_gpu_utilisation_percent)
    return UtilisationOut(
        known=True, utilisation_percent=shown.utilisation_percent, gpus_bound=shown.gpus_bound,
        gpus_idle=shown.gpus_idle, framebuffer_used_mib=shown.framebuffer_used_mib,
        observed_at=at, **_rule(settings)).model_dump()


def _unknown(reason: str, settings: Settings) -> dict[str, Any]:
    return UtilisationOut(known=False, reason=reason, **_rule(settings)).model_dump()


def cluster_utilisation(db: Session, principal: Principal, settings: Settings, slug: str,
                        name: str, *, history: bool = False) -> ClusterUtilisationOut:
    """A cluster of a tenant the caller sees: its GPUs now (and over the last day)."""
    cluster_for(db, principal, slug, name)
    try:
        reading = read(db, settings)
        theirs = [g for g in reading.gpus if (g.owner.tenant, g.owner.cluster) == (slug, name)]
        points = _history(reading, lambda o: (o.tenant, o.cluster) == (slug, name)) \
            if history else None
    except Unavailable as unavailable:
        return ClusterUtilisationOut(tenant=slug, cluster=name,
                                     **_unknown(unavailable.reason, settings))
    return ClusterUtilisationOut(tenant=slug, cluster=name, history=points,
                                 **_known(theirs, settings, reading.observed_at))


def history_query(ownership: Ownership, wanted: Callable[[Owner], bool]) -> str:
    """Only the series that may be ``wanted``'s: by its host namespaces and nodes, under each
    label the exporter may give them (a day of the whole fleet would be most of the answer)."""
    namespaces = sorted(ns for ns, owner in ownership.by_namespace.items() if wanted(owner))
    nodes = sorted(node for node, owner in ownership.by_node.items() if wanted(owner))
    selectors = [f'{UTILISATION}{{{label}="{value}"}}'
                 for values, labels in ((namespaces, NAMESPACE_LABELS), (nodes, NODE_LABELS))
                 for value in values for label in labels]
    return " or ".join(selectors) or f'{UTILISATION}{{UUID="-"}}'


def _history(reading: Reading, wanted: Callable[[Owner], bool]) -> list[UtilisationPoint]:
    end = reading.observed_at
    series = reading.prometheus.range(history_query(reading.ownership, wanted),
                                      end - HISTORY, end, HISTORY_STEP_SECONDS)
    means = mean_over_time(((s.labels, s.points) for s in series), reading.ownership, wanted)
    return [UtilisationPoint(at=datetime.fromtimestamp(at, UTC), utilisation_percent=value)
            for at, value in means.items()]


def tenant_utilisation(db: Session, principal: Principal, settings: Settings,
                       slug: str) -> TenantUtilisationOut:
    """A tenant the caller sees: all its GPUs now, and per cluster."""
    tenant = tenant_for(db, principal, slug)
    try:
        reading = read(db, settings)
    except Unavailable as unavailable:
        return TenantUtilisationOut(tenant=tenant.slug, **_unknown(unavailable.reason, settings))
    theirs = [g for g in reading.gpus if g.owner.tenant == tenant.slug]
    clusters = sorted({g.owner.cluster for g in theirs}, key=lambda c: (c is None, c or ""))
    return TenantUtilisationOut(
        tenant=tenant.slug, **_known(theirs, settings, reading.observed_at),
        clusters=[TenantClusterUtilisation(cluster=c, utilisation=UtilisationOut(
            **_known([g for g in theirs if g.owner.cluster == c], settings,
                     reading.observed_at))) for c in clusters])


def idle_gpus(db: Session, principal: Principal, settings: Settings) -> IdleGpusOut:
    """Platform admins: every GPU bound but idle past the window, by tenant and cluster."""
    ensure_platform_admin(principal)
    try:
        reading = read(db, settings)
    except Unavailable as unavailable:
        return IdleGpusOut(**_unknown(unavailable.reason, settings))
    threshold = settings.idle_gpu_utilisation_percent
    return IdleGpusOut(known=True, observed_at=reading.observed_at, **_rule(settings),
                       items=[_idle_out(g) for g in reading.gpus if g.idle(threshold)])


def _idle_out(gpu: Gpu) -> IdleGpuOut:
    return IdleGpuOut(tenant=gpu.owner.tenant, cluster=gpu.owner.cluster,
                      gpu_class=gpu.owner.gpu_class, node=gpu.node, gpu=gpu.gpu, uuid=gpu.key,
                      model=gpu.model, namespace=gpu.namespace, pod=gpu.pod,
                      utilisation_percent=gpu.utilisation_percent,
                      peak_in_window_percent=gpu.peak_in_window_percent or 0.0)


def count_idle(reading: Reading, threshold_percent: float) -> dict[tuple[str, str], int]:
    """For the worker's ``portal_tenant_idle_gpus{tenant,gpu_class}``: per tenant and class of
    the GPUs Prometheus shows, how many are idle past the window (0: none of them)."""
    counts: dict[tuple[str, str], int] = {}
    for gpu in reading.gpus:
        key = (gpu.owner.tenant, gpu.owner.gpu_class)
        counts[key] = counts.get(key, 0) + gpu.idle(threshold_percent)
    return counts
