"""Which reconcilers the worker runs."""

from __future__ import annotations

from app.config import Settings
from app.db import Database
from app.kube.connector import ClientConnector, KubeConnector
from app.quotas.reconciler import QuotaExpiryReconciler
from app.reconcilers.worker import Reconciler, Worker


def build_reconcilers(
    settings: Settings, database: Database, kube: KubeConnector
) -> list[Reconciler]:
    # Each kind's reconciler registers here (nodes, clusters, kubeconfigs, quota expiry).
    return [QuotaExpiryReconciler(database)]


def build_worker(
    settings: Settings, database: Database, kube: KubeConnector | None = None
) -> Worker:
    reconcilers = build_reconcilers(settings, database, kube or ClientConnector(settings))
    return Worker(reconcilers, poll_seconds=settings.worker_poll_seconds)
