"""Host admission for shared-pool namespaces: synced pods must use KAI and their own leaf queue.

The portal's mutating webhook (``kai_queue_webhook``, served by ``portal webhook``) sets the
scheduler and the queue label on pods that vCluster syncs, because the open-source vCluster cannot
rewrite them. A MutatingAdmissionPolicy could do the same without a server once it is GA (it is
alpha in Kubernetes 1.32); that is a possible later addition.

The ValidatingAdmissionPolicies below stay as the backstop.

KAI does not check that a pod may use the queue it names. The scheduler and the queue label are
set by the portal's mutating admission webhook on the open-source vCluster build, or by translate
patches (sync.toHost.pods.patches) on Pro. This ValidatingAdmissionPolicy is the backstop either
way: the host refuses any synced pod in a shared-pool namespace that does not name kai-scheduler
and exactly the namespace's leaf queue, whatever the virtual cluster sends. One policy and one
binding serve every tenant: the expected queue is read from the namespace's own label, which only
the portal writes.

The hardening guard is the same kind of backstop for hardened namespaces (label
``gpu-tenant-portal/hardening``): a synced pod created there must run every container with a
seccomp profile (RuntimeDefault or Localhost, its own or the pod's), and at level
``user-namespaces`` with ``hostUsers: false``. The webhook gives pods both; on a host whose API
server cannot reach the webhook, a pod that does not set them itself is refused, never run
unhardened. CREATE only: both fields are immutable, and a pod made before the namespace was
hardened must still take the syncer's updates.
"""

import base64
from typing import Any

from app.kit.webhook_address import WEBHOOK_PATH as WEBHOOK_PATH
from app.kube.manifests import labels as lbl

Manifest = dict[str, Any]
POLICY_NAME = "gpu-tenant-portal-kai-queue-guard"
HARDENING_POLICY_NAME = "gpu-tenant-portal-hardening-guard"
WEBHOOK_CONFIGURATION_NAME = "gpu-tenant-portal-kai-queue"
# (apiVersion, kind) of the webhook configuration, as the KubePort calls take them.
WEBHOOK_CONFIGURATION_KIND = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
WEBHOOK_NAME = "kai-queue.gpu-tenant-portal.io"
HARDENING_WEBHOOK_NAME = "user-namespaces.gpu-tenant-portal.io"
WEBHOOK_SERVICE_PORT = 443
_API_VERSION = "admissionregistration.k8s.io/v1"

_EXPRESSION = (
    f"object.spec.schedulerName == '{lbl.KAI_SCHEDULER_NAME}'"
    " && has(object.metadata.labels)"
    f" && '{lbl.KAI_QUEUE_LABEL}' in object.metadata.labels"
    f" && object.metadata.labels['{lbl.KAI_QUEUE_LABEL}']"
    f" == namespaceObject.metadata.labels['{lbl.QUEUE}']"
)


def _pod_rule() -> Manifest:
    return {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["pods"],
    }


def _shared_pool_namespaces() -> Manifest:
    return {"matchLabels": {**lbl.managed(), lbl.PLACEMENT: "shared-pool"}}


def _hardened_namespaces() -> Manifest:
    return {"matchLabels": lbl.managed(), "matchExpressions": [
        {"key": lbl.HARDENING, "operator": "In", "values": list(lbl.HARDENING_LEVELS)}]}


def _synced_pods() -> Manifest:
    # Only pods the syncer writes; the vCluster control plane itself runs on the default scheduler.
    return {"matchExpressions": [{"key": lbl.VCLUSTER_SYNCED_MARKER, "operator": "Exists"}]}


def queue_guard_policy() -> Manifest:
    rule = _pod_rule()
    validation = {
        "expression": _EXPRESSION,
        "message": "shared-pool pods must use kai-scheduler and their own leaf queue",
        "reason": "Forbidden",
    }
    return guard_policy(POLICY_NAME, rule, [validation])


def guard_policy(name: str, rule: Manifest, validations: list[Manifest],
                 variables: list[Manifest] | None = None) -> Manifest:
    """The ValidatingAdmissionPolicy ``name``: ``validations`` (with ``variables``) on what
    ``rule`` matches, failing closed."""
    spec: Manifest = {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [rule]},
                      "validations": validations}
    if variables:
        spec["variables"] = variables
    return {"apiVersion": _API_VERSION, "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": lbl.managed()}, "spec": spec}


def guard_binding(name: str, namespaces: Manifest) -> Manifest:
    """The binding of policy ``name`` that denies, for the synced pods of ``namespaces``."""
    return {
        "apiVersion": _API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": lbl.managed()},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": namespaces,
                               "objectSelector": _synced_pods()},
        },
    }


def queue_guard_binding() -> Manifest:
    return guard_binding(POLICY_NAME, _shared_pool_namespaces())


_HARDENING_VARIABLES = [
    {"name": "podProfile", "expression":
     "has(object.spec.securityContext) && has(object.spec.securityContext.seccompProfile)"
     " ? object.spec.securityContext.seccompProfile.type : ''"},
    {"name": "confined", "expression": "['RuntimeDefault', 'Localhost']"},
    {"name": "containers", "expression":
     "object.spec.containers + (has(object.spec.initContainers)"
     " ? object.spec.initContainers : [])"},
]
_SECCOMP_EXPRESSION = (
    "variables.containers.all(c, (has(c.securityContext) && has(c.securityContext.seccompProfile)"
    " ? c.securityContext.seccompProfile.type : variables.podProfile) in variables.confined)")
_USER_NAMESPACES_EXPRESSION = (
    f"namespaceObject.metadata.labels['{lbl.HARDENING}'] != '{lbl.HARDENING_USER_NAMESPACES}'"
    " || (has(object.spec.hostUsers) && object.spec.hostUsers == false)")


def hardening_guard_policy() -> Manifest:
    validations = [
        {"expression": _SECCOMP_EXPRESSION, "reason": "Forbidden",
         "message": "pods in a hardened namespace run every container with a seccomp profile "
                    "(RuntimeDefault or Localhost); the portal's admission webhook sets it, "
                    "and this host's API server did not call it"},
        {"expression": _USER_NAMESPACES_EXPRESSION, "reason": "Forbidden",
         "message": "pods in this namespace run in their own user namespace (hostUsers: "
                    "false); the portal's admission webhook sets it, and this host's API "
                    "server did not call it"},
    ]
    return guard_policy(HARDENING_POLICY_NAME, {**_pod_rule(), "operations": ["CREATE"]},
                        validations, _HARDENING_VARIABLES)


def hardening_guard_binding() -> Manifest:
    return guard_binding(HARDENING_POLICY_NAME, _hardened_namespaces())


def kai_queue_webhook(
    ca_bundle_pem: str, *, url: str | None, service_name: str, service_namespace: str
) -> Manifest:
    """The MutatingWebhookConfiguration that sends synced pods of shared-pool namespaces (KAI
    scheduler and queue) and of hardened namespaces (user namespaces, seccomp) to
    ``portal webhook``; one endpoint answers both, each call with every patch that applies.

    ``url`` (a webhook outside the cluster) wins over the in-cluster Service. ``ca_bundle_pem``
    holds every certificate the webhook may serve during a rotation.
    """
    client: Manifest = {"caBundle": base64.b64encode(ca_bundle_pem.encode()).decode()}
    if url:
        client["url"] = url
    else:
        client["service"] = {"name": service_name, "namespace": service_namespace,
                             "port": WEBHOOK_SERVICE_PORT, "path": WEBHOOK_PATH}
    webhook = {
        "name": WEBHOOK_NAME,
        "clientConfig": client,
        "rules": [{**_pod_rule(), "scope": "Namespaced"}],
        # Without the webhook a synced pod would land outside KAI's queues: refuse it instead.
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "namespaceSelector": _shared_pool_namespaces(),
        "objectSelector": _synced_pods(),
        "sideEffects": "None",
        "timeoutSeconds": 5,
        "admissionReviewVersions": ["v1"],
        "reinvocationPolicy": "IfNeeded",
    }
    # Without the webhook a hardened namespace's pod would run unhardened: refuse it instead.
    hardening = {**webhook, "name": HARDENING_WEBHOOK_NAME,
                 "namespaceSelector": _hardened_namespaces()}
    return {
        "apiVersion": _API_VERSION,
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION_NAME, "labels": lbl.managed()},
        "webhooks": [webhook, hardening],
    }
