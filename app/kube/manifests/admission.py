"""A host-side guard for shared-pool namespaces: synced pods must use KAI and their own leaf queue.

KAI does not check that a pod may use the queue it names. The scheduler and the queue label are
set by the portal's mutating admission webhook on the open-source vCluster build, or by translate
patches (sync.toHost.pods.patches) on Pro. This ValidatingAdmissionPolicy is the backstop either
way: the host refuses any synced pod in a shared-pool namespace that does not name kai-scheduler
and exactly the namespace's leaf queue, whatever the virtual cluster sends. One policy and one
binding serve every tenant: the expected queue is read from the namespace's own label, which only
the portal writes.
"""

from typing import Any

from app.kube.manifests import labels as lbl

Manifest = dict[str, Any]
POLICY_NAME = "gpu-tenant-portal-kai-queue-guard"
_API_VERSION = "admissionregistration.k8s.io/v1"

_EXPRESSION = (
    f"object.spec.schedulerName == '{lbl.KAI_SCHEDULER_NAME}'"
    " && has(object.metadata.labels)"
    f" && '{lbl.KAI_QUEUE_LABEL}' in object.metadata.labels"
    f" && object.metadata.labels['{lbl.KAI_QUEUE_LABEL}']"
    f" == namespaceObject.metadata.labels['{lbl.QUEUE}']"
)


def queue_guard_policy() -> Manifest:
    rule = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["pods"],
    }
    validation = {
        "expression": _EXPRESSION,
        "message": "shared-pool pods must use kai-scheduler and their own leaf queue",
        "reason": "Forbidden",
    }
    return {
        "apiVersion": _API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": lbl.managed()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            "validations": [validation],
        },
    }


def queue_guard_binding() -> Manifest:
    namespaces = {"matchLabels": {**lbl.managed(), lbl.PLACEMENT: "shared-pool"}}
    # Only pods the syncer writes; the vCluster control plane itself runs on the default scheduler.
    synced_pods = {"matchExpressions": [{"key": lbl.VCLUSTER_SYNCED_MARKER, "operator": "Exists"}]}
    return {
        "apiVersion": _API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": lbl.managed()},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": namespaces, "objectSelector": synced_pods},
        },
    }
