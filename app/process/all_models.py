"""Every table, imported in one place so that Alembic and tests see the whole metadata."""

from app.audit.models import AuditEvent
from app.auth.models import ApiToken, IdempotencyKey, User, WebSession
from app.clusters.models import ClusterGpusInUse, ClusterGpuWait, VirtualCluster
from app.database.core import Base
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kubeconfigs.models import KubeconfigGrant
from app.machines.models import Machine
from app.nodes.models import Node, NodeAssignment
from app.notifications.models import (
    Notification,
    NotificationDelivery,
    NotificationPreference,
    WebhookEndpoint,
)
from app.quotas.models import GpusInUse, QuotaRequest, TenantQuota
from app.templates.models import ClusterTemplate, ClusterTemplateVersion
from app.tenants.models import GroupMapping, Membership, Tenant
from app.usage.models import GpuReclaim, HourlyUsage, LedgerEntry, UsageSample
from app.workqueue.models import WorkItem

__all__ = [
    "ApiToken",
    "AuditEvent",
    "Base",
    "ClusterGpuWait",
    "ClusterGpusInUse",
    "ClusterTemplate",
    "ClusterTemplateVersion",
    "GpuClass",
    "GpuReclaim",
    "GpusInUse",
    "GroupMapping",
    "HostCluster",
    "HourlyUsage",
    "IdempotencyKey",
    "KubeconfigGrant",
    "LedgerEntry",
    "Machine",
    "Membership",
    "Node",
    "NodeAssignment",
    "Notification",
    "NotificationDelivery",
    "NotificationPreference",
    "QuotaRequest",
    "Tenant",
    "TenantQuota",
    "UsageSample",
    "User",
    "VirtualCluster",
    "WebSession",
    "WebhookEndpoint",
    "WorkItem",
]
