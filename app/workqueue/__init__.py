"""The worker's queue of (kind, key) pairs: what is due, who holds it, how often it failed.

A service that changes desired state enqueues the keys it affects in its own transaction
(``enqueue``); the runtime in ``app.reconcilers`` claims, renews and finishes them. This
package sits below every domain so that any of them may enqueue.
"""

from app.workqueue.kinds import (
    ALL,
    CLUSTERS,
    HOSTS,
    KUBECONFIGS,
    MACHINES,
    NODES,
    NOTIFICATION_SCAN,
    NOTIFICATIONS,
    PLATFORM_OBJECTS,
    QUOTA_EXPIRY,
    SLEEP_POLICY,
    TEMPLATE_VALIDATION,
    TENANT_QUEUES,
    USAGE,
    WEBHOOK,
    tenant_queue_key,
)
from app.workqueue.repository import ask, enqueue, enqueue_many

__all__ = ["ALL", "CLUSTERS", "HOSTS", "KUBECONFIGS", "MACHINES", "NODES", "NOTIFICATIONS",
           "NOTIFICATION_SCAN", "PLATFORM_OBJECTS", "QUOTA_EXPIRY", "SLEEP_POLICY",
           "TEMPLATE_VALIDATION", "TENANT_QUEUES", "USAGE", "WEBHOOK", "ask", "enqueue",
           "enqueue_many", "tenant_queue_key"]
