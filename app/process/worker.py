"""Which kinds the worker runs, and the runtime that runs them."""

from __future__ import annotations

from app.database.core import Database
from app.kit.config import Settings
from app.kube.connector import ClientConnector, KubeConnector
from app.kube.helm import Installer
from app.process.wiring import connect_hooks
from app.reconcilers.clusters import ClusterReconciler
from app.reconcilers.hosts import HostHealthReconciler
from app.reconcilers.kind import Kind
from app.reconcilers.kubeconfigs import KubeconfigReconciler
from app.reconcilers.machines import MachineReconciler
from app.reconcilers.nodes import NodeReconciler
from app.reconcilers.notification_scan import NotificationScanner
from app.reconcilers.notifications import NotificationSender
from app.reconcilers.platform_objects import PlatformObjectsReconciler
from app.reconcilers.quota_expiry import QuotaExpiryReconciler
from app.reconcilers.runtime import Runtime
from app.reconcilers.sleep_policy import SleepPolicyReconciler
from app.reconcilers.template_validation import TemplateValidator
from app.reconcilers.tenant_queues import TenantQueueReconciler
from app.reconcilers.usage import UsageSampler
from app.reconcilers.webhook import WebhookReconciler
from app.templates.charts import ChartResolver, ChartSources


def build_kinds(
    settings: Settings, database: Database, kube: KubeConnector,
    installer: Installer | None = None, charts: ChartResolver | None = None,
) -> list[Kind]:
    # The host clusters' health check asks the templates' chart resolver, injected here.
    connect_hooks()
    charts = charts or ChartSources()
    return [QuotaExpiryReconciler(settings, database),
            SleepPolicyReconciler(settings, database),
            KubeconfigReconciler.from_settings(settings, database, kube),
            NodeReconciler(settings, database, kube),
            MachineReconciler(settings, database, kube),
            ClusterReconciler(settings, database, kube, installer),
            TenantQueueReconciler(settings, database, kube),
            PlatformObjectsReconciler(settings, database, kube),
            WebhookReconciler(settings, database, kube),
            UsageSampler(settings, database, kube),
            TemplateValidator(settings, database, kube, charts),
            HostHealthReconciler(settings, database, kube, charts),
            NotificationSender(settings, database),
            NotificationScanner(settings, database)]


def build_worker(
    settings: Settings, database: Database, kube: KubeConnector | None = None,
    installer: Installer | None = None, charts: ChartResolver | None = None,
) -> Runtime:
    """``installer`` defaults to helm (the simulated host of ``portal dev`` brings its own);
    ``charts`` (add-on chart lookups for template validation) to the repositories themselves."""
    kinds = build_kinds(settings, database, kube or ClientConnector(settings), installer, charts)
    return Runtime(database, kinds, lease_seconds=settings.worker_lease_seconds,
                   concurrency=settings.worker_concurrency,
                   poll_seconds=settings.worker_poll_seconds)
