"""The kinds of notification: who hears of each, whether a person may turn it off, and how it
reads on the preferences page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# tenant: the tenant's admins (and the person it concerns), its webhooks;
# platform: the platform admins, the platform's webhooks;
# person: the one person it concerns (a kubeconfig's holder, an endpoint's registrant), by email.
Audience = Literal["tenant", "platform", "person"]


@dataclass(frozen=True)
class Kind:
    name: str
    audience: Audience
    mandatory: bool
    # What the preferences page says of it.
    title: str
    description: str


QUOTA_REQUESTED = "quota.requested"
QUOTA_DECIDED = "quota.decided"
QUOTA_CHANGED = "quota.changed"
QUOTA_EXPIRING = "quota.expiring"
CLUSTER_READY = "cluster.ready"
CLUSTER_FAILED = "cluster.failed"
CLUSTER_STUCK = "cluster.stuck"
CLUSTER_ASLEEP = "cluster.asleep"
CLUSTER_AWAKE = "cluster.awake"
CLUSTER_DELETION_ANNOUNCED = "cluster.deletion_announced"
CLUSTER_DELETED = "cluster.deleted"
KUBECONFIG_EXPIRING = "kubeconfig.expiring"
GPUS_RECLAIMED = "gpus.reclaimed"
GPUS_IDLE = "gpus.idle"
HOST_UNREACHABLE = "host.unreachable"
MACHINE_FAILED = "machine.failed"
TEMPLATE_VALIDATION_FAILED = "template.validation_failed"
ENDPOINT_FAILING = "endpoint.failing"
# A test-send from an endpoint's page: to that endpoint only, never by email.
TEST = "test"

KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    Kind(QUOTA_REQUESTED, "platform", False, "Quota request submitted",
         "A tenant asked for GPU quota: it waits for a decision."),
    Kind(QUOTA_DECIDED, "tenant", False, "Quota request decided",
         "A quota request of your tenant was approved or rejected."),
    Kind(QUOTA_CHANGED, "tenant", False, "Quota changed",
         "Your tenant's quota changed without a request: changed by an admin, or expired."),
    Kind(QUOTA_EXPIRING, "tenant", False, "Quota expiring soon",
         "An approved quota of your tenant ends within three days."),
    Kind(CLUSTER_READY, "tenant", False, "Cluster ready",
         "A cluster became ready to use."),
    Kind(CLUSTER_FAILED, "tenant", False, "Cluster failed",
         "A cluster failed and needs someone to look at it."),
    Kind(CLUSTER_STUCK, "tenant", False, "Cluster stuck",
         "A cluster has been provisioning for longer than it should."),
    Kind(CLUSTER_ASLEEP, "tenant", False, "Cluster asleep",
         "A cluster was put to sleep: its GPUs went back to the pool."),
    Kind(CLUSTER_AWAKE, "tenant", False, "Cluster awake",
         "A sleeping cluster woke up."),
    Kind(CLUSTER_DELETION_ANNOUNCED, "tenant", True, "Cluster deletion announced",
         "A sleeping cluster will be deleted: the warning before it goes."),
    Kind(CLUSTER_DELETED, "tenant", False, "Cluster deleted",
         "A cluster and everything in it were deleted."),
    Kind(KUBECONFIG_EXPIRING, "person", False, "Kubeconfig expiring",
         "A kubeconfig issued to you expires soon: when a quarter of its life is left, at "
         "most a day (none for kubeconfigs of less than 4 hours)."),
    Kind(GPUS_RECLAIMED, "tenant", False, "Burst GPUs reclaimed",
         "GPUs your tenant borrowed beyond its quota were taken back (one message per "
         "window)."),
    Kind(GPUS_IDLE, "tenant", False, "Idle GPUs",
         "GPUs your tenant holds have sat idle: once a day."),
    Kind(HOST_UNREACHABLE, "platform", False, "Host unreachable",
         "A host cluster stopped answering."),
    Kind(MACHINE_FAILED, "platform", False, "Machine failed",
         "A bare-metal machine failed to provision or join."),
    Kind(TEMPLATE_VALIDATION_FAILED, "platform", False, "Template validation failed",
         "A cluster template version failed its validation against a host."),
    Kind(ENDPOINT_FAILING, "person", False, "Webhook endpoint failing",
         "A webhook endpoint you registered keeps failing."),
    Kind(TEST, "person", False, "Test message", "A test-send from a webhook endpoint's page."),
)}


def is_mandatory(kind: str) -> bool:
    found = KINDS.get(kind)
    return found is not None and found.mandatory
