"""Which reconcilers the worker runs."""

from __future__ import annotations

from app.config import Settings
from app.db import Database
from app.quotas.reconciler import QuotaExpiryReconciler
from app.reconcilers.worker import Reconciler, Worker


def build_reconcilers(settings: Settings, database: Database) -> list[Reconciler]:
    # Reconcilers register here as their issues land (nodes, clusters, quota expiry).
    return [QuotaExpiryReconciler(database)]


def build_worker(settings: Settings, database: Database) -> Worker:
    return Worker(build_reconcilers(settings, database), poll_seconds=settings.worker_poll_seconds)
