"""The kinds of work, by the name each has in the queue, and what its keys are."""

CLUSTERS = "clusters"  # a virtual cluster's id
# "<tenant id>:<host cluster id>" (``tenant_queue_key``): the tenant's KAI queue on that host
TENANT_QUEUES = "tenant-queues"
# A host cluster's id: what every tenant there shares (the KAI root queue, the guards)
PLATFORM_OBJECTS = "platform-objects"
NODES = "nodes"  # a host cluster's id: its node inventory and dedicated-node labels
HOSTS = "hosts"  # a host cluster's id: its health checks
WEBHOOK = "webhook"  # ALL: the webhook's certificate, and its configuration on every host
USAGE = "usage"  # a host cluster's id: GPU use samples; "retention": folding old samples
KUBECONFIGS = "kubeconfigs"  # a kubeconfig grant's id whose Secret is to be removed
QUOTA_EXPIRY = "quota-expiry"  # one key, ALL
SLEEP_POLICY = "sleep-policy"  # one key, ALL: idle and scheduled sleep, deletion after sleep

# The key of a kind with one object for the whole portal.
ALL = "all"
TEMPLATE_VALIDATION = "template-validation"  # a template version's id
MACHINES = "machines"  # a bare-metal machine's id: its BareMetalHost, secrets and phase
# A destination with pending deliveries: "email:<user id>" or "webhook:<endpoint id>"
NOTIFICATIONS = "notifications"
# One key, ALL: the notifications no audited change causes (quota and kubeconfig ending soon,
# clusters stuck provisioning, idle GPUs), found by looking
NOTIFICATION_SCAN = "notification-scan"


def tenant_queue_key(tenant_id: int, host_cluster_id: int) -> str:
    return f"{tenant_id}:{host_cluster_id}"
