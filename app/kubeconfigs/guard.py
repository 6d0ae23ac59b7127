"""Pure builders for what keeps kubeconfig holders inside their role in a virtual cluster.

Why: every user's ServiceAccount (tenant admins' cluster-admin ones included) and every grant's
bound Secret live in one portal-owned namespace. The built-in ``edit`` ClusterRole, bound
cluster-wide, grants ``impersonate`` on ServiceAccounts, ``create`` on
``serviceaccounts/token`` and write access to Secrets and Pods in every namespace: an ``edit``
user could impersonate an admin's ServiceAccount or mint a token for it, create a legacy
``kubernetes.io/service-account-token`` Secret or a Pod running as it, or delete other users'
bound Secrets (revoking their kubeconfigs); a Pod in ``kube-system`` could run as a
controller's ServiceAccount. Three layers close this:

- ``edit`` grants bind ``gpu-tenant-portal:edit``, explicit rules for everyday workloads without
  ``impersonate`` and without ``serviceaccounts/token``. ``view`` keeps the built-in ``view``
  (no Secrets, no impersonation, no tokens) and ``admin`` keeps ``cluster-admin``.
- A ValidatingAdmissionPolicy denies every create, update and delete in the portal namespace
  (and of the namespace itself) unless the requester is the portal or the control plane.
- Another denies ``edit`` and ``view`` grants every write and ``exec`` in the system
  namespaces (``kube-system``, ``kube-public``, ``kube-node-lease``).

A holder of ``edit`` may still run a Pod as any ServiceAccount of a namespace it writes in, as
with Kubernetes' own ``edit``: a tenant admin who binds broad rights to a ServiceAccount gives
them to every ``edit`` holder.

Who the portal is: vCluster exports (Secret ``vc-<release>``, key ``config``) the kubeadm-style
admin credential, a client certificate with CN ``kubernetes-admin`` and O ``system:masters``
(loft-sh/vcluster ``pkg/certs``). The policy trusts the ``system:masters`` group, plus the
username read from the admin kubeconfig when it can be read (a certificate's CN, or a
ServiceAccount token's subject, for ``exportKubeConfig.serviceAccount`` setups), plus the
control plane: ``system:kube-controller-manager`` and the ``kube-system`` ServiceAccounts its
controllers act as when it runs with ``--use-service-account-credentials`` (kubeadm's and
vCluster's default), which create the namespace's ``default`` ServiceAccount and
``kube-root-ca.crt``, empty the namespace when it is deleted and collect garbage. Trusting the
controller-manager's own name alone, a real API server refused those controllers (they retried
forever, and deleting the namespace would never finish). None of these names comes with an
``edit`` or ``view`` kubeconfig.

Admission policies are not applied to ValidatingAdmissionPolicy(Binding) objects themselves
(kube-apiserver exempts them), so the guard cannot protect itself; deleting it needs RBAC on
``admissionregistration.k8s.io`` that only ``cluster-admin`` holders have, who are already
admins of the virtual cluster. The portal re-applies the guard on every issue.

No I/O here: the same input always gives the same output (golden-tested).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from app.kube.manifests.labels import MANAGED_BY, MANAGED_BY_VALUE
from app.kubeconfigs.manifests import EDIT_ROLE, PORTAL_NAMESPACE

POLICY_NAME = f"{PORTAL_NAMESPACE}-namespace-guard"
SYSTEM_POLICY_NAME = f"{PORTAL_NAMESPACE}-system-namespaces-guard"
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
# The username of an edit or view grant's ServiceAccount (manifests.service_account_name).
_NON_ADMIN_GRANT = f"^system:serviceaccount:{PORTAL_NAMESPACE}:user-[0-9]+-(edit|view)$"
MASTERS = "system:masters"
CONTROLLER_MANAGER = "system:kube-controller-manager"
# The controllers that write in every namespace, as their ServiceAccounts.
CONTROLLER_ACCOUNTS = tuple(f"system:serviceaccount:kube-system:{name}" for name in (
    "service-account-controller", "root-ca-cert-publisher", "service-ca-cert-publisher",
    "namespace-controller", "generic-garbage-collector"))
_ADMISSION = "admissionregistration.k8s.io/v1"
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
# (apiGroups, resources, verbs): what tenants use from the built-in edit role, minus
# serviceaccounts impersonate, serviceaccounts/token and the proxy subresources.
_EDIT_RULES: list[tuple[list[str], list[str], list[str]]] = [
    ([""], ["configmaps", "events", "persistentvolumeclaims", "pods", "replicationcontrollers",
            "replicationcontrollers/scale", "secrets", "serviceaccounts", "services"],
     _READ + _WRITE),
    ([""], ["pods/attach", "pods/exec", "pods/portforward"], ["create", "get"]),
    ([""], ["pods/eviction"], ["create"]),
    ([""], ["endpoints", "limitranges", "namespaces", "namespaces/status",
            "persistentvolumeclaims/status", "pods/log", "pods/status",
            "replicationcontrollers/status", "resourcequotas", "resourcequotas/status",
            "services/status"], _READ),
    (["apps"], ["daemonsets", "deployments", "deployments/scale", "replicasets",
                "replicasets/scale", "statefulsets", "statefulsets/scale"], _READ + _WRITE),
    (["apps"], ["controllerrevisions", "daemonsets/status", "deployments/status",
                "replicasets/status", "statefulsets/status"], _READ),
    (["autoscaling"], ["horizontalpodautoscalers"], _READ + _WRITE),
    (["autoscaling"], ["horizontalpodautoscalers/status"], _READ),
    (["batch"], ["cronjobs", "jobs"], _READ + _WRITE),
    (["batch"], ["cronjobs/status", "jobs/status"], _READ),
    (["policy"], ["poddisruptionbudgets"], _READ + _WRITE),
    (["policy"], ["poddisruptionbudgets/status"], _READ),
    (["networking.k8s.io"], ["ingresses", "networkpolicies"], _READ + _WRITE),
    (["networking.k8s.io"], ["ingresses/status"], _READ),
    (["discovery.k8s.io"], ["endpointslices"], _READ),
    (["events.k8s.io"], ["events"], _READ),
    (["coordination.k8s.io"], ["leases"], _READ + _WRITE),
]

Manifest = dict[str, Any]


@dataclass(frozen=True)
class PortalIdentity:
    """The usernames the portal's admin credential authenticates as, where it can tell."""

    usernames: tuple[str, ...] = ()


def _labels() -> dict[str, str]:
    return {MANAGED_BY: MANAGED_BY_VALUE}


def edit_cluster_role() -> Manifest:
    rules = [{"apiGroups": groups, "resources": resources, "verbs": verbs}
             for groups, resources, verbs in _EDIT_RULES]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": EDIT_ROLE, "labels": _labels()}, "rules": rules}


def trusted_expression(portal: PortalIdentity) -> str:
    """CEL: whether the request comes from the portal or the control plane."""
    users = sorted({*portal.usernames, CONTROLLER_MANAGER, *CONTROLLER_ACCOUNTS})
    # json.dumps gives a valid CEL string literal, whatever the certificate's CN holds.
    listed = ", ".join(json.dumps(user) for user in users)
    return (f"request.userInfo.username in [{listed}] || "
            f"(has(request.userInfo.groups) && {json.dumps(MASTERS)} in request.userInfo.groups)")


def namespace_guard_policy(portal: PortalIdentity) -> Manifest:
    writes = ["CREATE", "UPDATE", "DELETE"]
    rules = [
        # "*/*" is every resource and every subresource; the API server refuses it beside "*".
        {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"],
         "operations": writes, "scope": "Namespaced"},
        # The selector below matches a Namespace object by its own labels.
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces", "namespaces/*"],
         "operations": writes, "scope": "Cluster"},
    ]
    validation = {
        "expression": trusted_expression(portal),
        "message": f"the {PORTAL_NAMESPACE} namespace is managed by the GPU Tenant Portal",
        "reason": "Forbidden",
    }
    return {
        "apiVersion": _ADMISSION, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": _labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": PORTAL_NAMESPACE}},
                "resourceRules": rules,
            },
            "validations": [validation],
        },
    }


def namespace_guard_binding() -> Manifest:
    return _binding(POLICY_NAME)


def system_namespaces_guard_policy() -> Manifest:
    """Keeps ``edit`` and ``view`` grants out of the system namespaces.

    ``edit`` is bound cluster-wide and may create pods: in ``kube-system`` a pod could run as a
    controller's ServiceAccount and hand its token (and its rights) to the user; ``exec`` into
    a system pod (CONNECT) would do the same. Admin grants are cluster-admins anyway.
    """
    rule = {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"],
            "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"], "scope": "Namespaced"}
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": list(SYSTEM_NAMESPACES)}]}
    validation = {
        "expression": f"!request.userInfo.username.matches({json.dumps(_NON_ADMIN_GRANT)})",
        "message": "edit and view kubeconfigs do not write in the system namespaces",
        "reason": "Forbidden",
    }
    return {
        "apiVersion": _ADMISSION, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": SYSTEM_POLICY_NAME, "labels": _labels()},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"namespaceSelector": selector, "resourceRules": [rule]},
                 "validations": [validation]},
    }


def system_namespaces_guard_binding() -> Manifest:
    return _binding(SYSTEM_POLICY_NAME)


def _binding(policy: str) -> Manifest:
    return {
        "apiVersion": _ADMISSION, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": _labels()},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    }


def guard_objects(portal: PortalIdentity) -> list[Manifest]:
    """What a virtual cluster needs before any grant, in apply order."""
    return [edit_cluster_role(), namespace_guard_policy(portal), namespace_guard_binding(),
            system_namespaces_guard_policy(), system_namespaces_guard_binding()]


# ----- who the admin kubeconfig authenticates as


def portal_identity(admin_kubeconfig_yaml: str) -> PortalIdentity:
    user = _current_user(yaml.safe_load(admin_kubeconfig_yaml) or {})
    name = _certificate_cn(user.get("client-certificate-data")) or _token_subject(
        user.get("token"))
    return PortalIdentity(usernames=(name,) if name else ())


def _current_user(config: dict[str, Any]) -> dict[str, Any]:
    users = {u.get("name"): u.get("user") or {} for u in config.get("users") or []}
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    current = contexts.get(config.get("current-context"), {}).get("user")
    found = users.get(current) or next(iter(users.values()), {})
    return found if isinstance(found, dict) else {}


def _certificate_cn(data: Any) -> str | None:
    if not isinstance(data, str):
        return None
    try:
        certificate = x509.load_pem_x509_certificate(base64.b64decode(data))
    except (ValueError, binascii.Error):
        return None
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else None
    return value if isinstance(value, str) and value else None


def _token_subject(token: Any) -> str | None:
    """A ServiceAccount token's subject is its username; other tokens' usernames are not known."""
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    is_service_account = isinstance(subject, str) and subject.startswith(
        "system:serviceaccount:")
    return subject if is_service_account else None
