"""Which reconcilers the worker runs."""

from __future__ import annotations

from app.clusters.installer import Installer
from app.clusters.reconciler import ClusterReconciler
from app.database.core import Database
from app.hosts.reconciler import HostHealthReconciler
from app.kit.config import Settings
from app.kube.connector import ClientConnector, KubeConnector
from app.kubeconfigs.reconciler import KubeconfigReconciler
from app.nodes.reconciler import NodeReconciler
from app.process.wiring import connect_hooks
from app.quotas.reconciler import QuotaExpiryReconciler
from app.reconcilers.worker import Reconciler, Worker
from app.templates.charts import ChartResolver, ChartSources
from app.templates.validator import TemplateValidator
from app.usage.sampler import UsageSampler
from app.webhook.reconciler import WebhookReconciler


def build_reconcilers(
    settings: Settings, database: Database, kube: KubeConnector,
    installer: Installer | None = None, charts: ChartResolver | None = None,
) -> list[Reconciler]:
    # Each kind's reconciler registers here (nodes, clusters, kubeconfigs, quota expiry, and
    # the shared-pool admission webhook's certificate and configuration, GPU use samples, and
    # the template validations admins queued, and the host clusters' health, whose chart check
    # is the templates' resolver, injected here).
    connect_hooks()
    charts = charts or ChartSources()
    return [QuotaExpiryReconciler(database),
            KubeconfigReconciler.from_settings(settings, database, kube),
            NodeReconciler(settings, database, kube),
            ClusterReconciler(settings, database, kube, installer),
            WebhookReconciler(settings, database, kube),
            UsageSampler(settings, database, kube),
            TemplateValidator(settings, database, kube, charts),
            HostHealthReconciler(settings, database, kube, charts)]


def build_worker(
    settings: Settings, database: Database, kube: KubeConnector | None = None,
    installer: Installer | None = None, charts: ChartResolver | None = None,
) -> Worker:
    """``installer`` defaults to helm (the simulated host of ``portal dev`` brings its own);
    ``charts`` (add-on chart lookups for template validation) to the repositories themselves."""
    reconcilers = build_reconcilers(settings, database, kube or ClientConnector(settings),
                                    installer, charts)
    return Worker(reconcilers, poll_seconds=settings.worker_poll_seconds)
