"""Each asked cluster's GPUs over a window of its own: the highest utilisation of every GPU that
was bound (the same series) for the whole window, for a sleep policy that calls a cluster idle
when its GPUs stay below the idle threshold.

One instant query per distinct window; the caller reads ``ownership`` in its database session
and calls ``cluster_peaks`` after it, so no HTTP waits inside a transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from app.kit.config import Settings
from app.telemetry.prometheus import Prometheus
from app.utilisation.mapping import Ownership, gpu_key, holder_of, owner_of

UTILISATION = "DCGM_FI_DEV_GPU_UTIL"


@dataclass(frozen=True)
class Asked:
    """A cluster by its tenant's slug and its name, and the window to look back over."""

    tenant: str
    cluster: str
    window_s: int


def window_query(window_s: int) -> str:
    """Each GPU's highest utilisation over the window, of the series that already existed at
    its start: a GPU bound less than the window ago has no figure."""
    return (f"max_over_time({UTILISATION}[{window_s}s]) and {UTILISATION} offset {window_s}s")


def cluster_peaks(settings: Settings, ownership: Ownership, asked: Mapping[int, Asked],
                  at: datetime) -> dict[int, list[float]]:
    """Per asked cluster id, the window's peak of each of its GPUs bound all the window
    (one figure per GPU, by ``mapping.owner_of``); raises ``Unavailable`` when Prometheus
    cannot say, within ``PORTAL_PROMETHEUS_TIMEOUT_SECONDS`` for all the queries."""
    prometheus = Prometheus(settings.prometheus_url, settings.prometheus_timeout_seconds)
    wanted = {(a.tenant, a.cluster, a.window_s): cluster_id for cluster_id, a in asked.items()}
    peaks: dict[int, dict[str, float]] = {cluster_id: {} for cluster_id in asked}
    for window_s in sorted({a.window_s for a in asked.values()}):
        for sample in prometheus.instant(window_query(window_s), at):
            if not any(holder_of(sample.labels)):
                continue  # a GPU no pod held (a private node's spare): none of its cluster's
            owner = owner_of(sample.labels, ownership)
            cluster_id = wanted.get((owner.tenant, owner.cluster or "", window_s)) \
                if owner else None
            if cluster_id is None:
                continue
            key = gpu_key(sample.labels)
            gpus = peaks[cluster_id]
            gpus[key] = max(sample.value, gpus.get(key, sample.value))
    return {cluster_id: list(gpus.values()) for cluster_id, gpus in peaks.items()}
