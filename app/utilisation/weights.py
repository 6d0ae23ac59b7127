"""How many of each usage subject's GPUs compute, for the ledger's utilised GPU-hours: the
worker's usage kind (app/reconcilers/usage.py) reads it once per host pass, outside its
transaction, and hands the plain numbers to app.usage.sampling (usage and utilisation do not
import each other).

A queue's GPUs are those whose pod namespace is its cluster's host namespace; a node's, every
GPU the exporter reports on it (a GPU no pod holds computes nothing, and the figure is capped
at the GPUs bound anyway). Each GPU counts its ``DCGM_FI_DEV_GPU_UTIL`` / 100, once however
many series name it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime

from app.kit.config import Settings
from app.telemetry.prometheus import Prometheus, Unavailable
from app.utilisation.mapping import NAMESPACE_LABELS, Ownership, gpu_key, node_of
from app.utilisation.service import UTILISATION

log = logging.getLogger(__name__)

Subject = tuple[str, str] | str


def utilised_by_subject(ownership: Ownership, settings: Settings,
                        at: datetime) -> dict[Subject, tuple[float, int]] | None:
    """Per cluster (tenant slug, cluster name) and per owned node (its name): the utilisation
    of its GPUs / 100 summed, and how many GPUs that is; None when Prometheus cannot say
    (unset, down, slow: one query, within ``PORTAL_PROMETHEUS_TIMEOUT_SECONDS``)."""
    prometheus = Prometheus(settings.prometheus_url, settings.prometheus_timeout_seconds)
    try:
        series = prometheus.instant(UTILISATION, at)
    except Unavailable as unavailable:
        if settings.prometheus_url:
            log.info("GPU utilisation unknown for these usage samples (%s)", unavailable.reason)
        return None
    return weigh(((s.labels, s.value) for s in series), ownership)


def weigh(series: Iterable[tuple[Mapping[str, str], float]],
          ownership: Ownership) -> dict[Subject, tuple[float, int]]:
    """The utilisation samples (percent) summed per subject, each GPU once."""
    found: dict[Subject, tuple[float, int]] = {}
    counted: set[str] = set()
    for labels, percent in series:
        key = gpu_key(labels)
        if key in counted:
            continue
        counted.add(key)
        share = min(max(percent / 100, 0.0), 1.0)
        for subject in _subjects(labels, ownership):
            computing, gpus = found.get(subject, (0.0, 0))
            found[subject] = (computing + share, gpus + 1)
    return found


def _subjects(labels: Mapping[str, str], ownership: Ownership) -> list[Subject]:
    """The cluster whose host namespace the GPU's pod runs in, and the owned node it is on."""
    subjects: list[Subject] = []
    for label in NAMESPACE_LABELS:
        owner = ownership.by_namespace.get(labels.get(label, ""))
        if owner is not None and owner.cluster is not None:
            subjects.append((owner.tenant, owner.cluster))
            break
    node = node_of(labels)
    if node in ownership.by_node:
        subjects.append(node)
    return subjects
