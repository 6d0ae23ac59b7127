"""Pure builders for what a kubeconfig grant needs inside a virtual cluster, and the file itself.

Per user and role: a ServiceAccount in the portal-owned namespace and a ClusterRoleBinding to
``cluster-admin``, the portal's ``gpu-tenant-portal:edit`` or ``view`` (the ClusterRole and the
admission policy that guard the namespace are in ``app.kubeconfigs.guard``). Per grant: an
``Opaque`` Secret that the TokenRequest binds the token to. Not a
``kubernetes.io/service-account-token`` Secret: for that type the token controller writes a
long-lived legacy token into the Secret, which would outlive the grant's expiry and sit
readable in the cluster. A TokenRequest may bind to any Secret, and the API server rejects a
bound token once that Secret is gone, so deleting the Opaque Secret revokes exactly this
kubeconfig while the ServiceAccount's other grants keep working.

No I/O here: the same input always gives the same output (golden-tested).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from app.kube.manifests.labels import MANAGED_BY, MANAGED_BY_VALUE
from app.kube.manifests.names import shorten

PORTAL_NAMESPACE = "gpu-tenant-portal"
# Not the built-in edit: it may impersonate and mint tokens for ServiceAccounts (see guard.py).
EDIT_ROLE = f"{PORTAL_NAMESPACE}:edit"
CLUSTER_ROLES = {"admin": "cluster-admin", "edit": EDIT_ROLE, "view": "view"}
USER_ID = "gpu-tenant-portal/user-id"
ROLE = "gpu-tenant-portal/role"
GRANT_ID = "gpu-tenant-portal/grant-id"
USER_EMAIL = "gpu-tenant-portal/user-email"
EXPIRES_AT = "gpu-tenant-portal/expires-at"
_SUFFIX = re.compile(r"^[a-z0-9]{1,16}$")

Manifest = dict[str, Any]


@dataclass(frozen=True)
class GrantSpec:
    """One grant as the cluster sees it: who, which role, which Secret, until when."""

    grant_id: int
    user_id: int
    user_email: str
    role: str
    secret_suffix: str
    expires_at: datetime

    def __post_init__(self) -> None:
        if self.role not in CLUSTER_ROLES:
            raise ValueError(f"unknown kubeconfig role {self.role!r}")
        if not _SUFFIX.match(self.secret_suffix):
            raise ValueError("secret_suffix must be 1-16 lowercase letters or digits")

    @property
    def service_account(self) -> str:
        return service_account_name(self.user_id, self.role)

    @property
    def secret_name(self) -> str:
        return secret_name(self.service_account, self.secret_suffix)


@dataclass(frozen=True)
class KubeconfigSpec:
    """What a tenant's kubeconfig names: one cluster, one user, one context."""

    cluster: str
    context: str
    server: str
    ca_data: str | None
    user: str
    token: str
    namespace: str = "default"
    # Comment lines the file starts with (the simulated host's warning).
    notice: tuple[str, ...] = ()


def service_account_name(user_id: int, role: str) -> str:
    return f"user-{user_id}-{role}"


def secret_name(service_account: str, suffix: str) -> str:
    return shorten(f"{service_account}-{suffix}", 253)


def binding_name(service_account: str) -> str:
    return f"{PORTAL_NAMESPACE}:{service_account}"


def _labels(spec: GrantSpec) -> dict[str, str]:
    return {MANAGED_BY: MANAGED_BY_VALUE, ROLE: spec.role, USER_ID: str(spec.user_id)}


def portal_namespace() -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": PORTAL_NAMESPACE, "labels": {MANAGED_BY: MANAGED_BY_VALUE}}}


def service_account(spec: GrantSpec) -> Manifest:
    return {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": spec.service_account, "namespace": PORTAL_NAMESPACE,
                     "labels": _labels(spec), "annotations": {USER_EMAIL: spec.user_email}},
        # Tokens come only from TokenRequests; nothing should mount one into a pod.
        "automountServiceAccountToken": False,
    }


def role_binding(spec: GrantSpec) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name(spec.service_account), "labels": _labels(spec)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": CLUSTER_ROLES[spec.role]},
        "subjects": [{"kind": "ServiceAccount", "name": spec.service_account,
                      "namespace": PORTAL_NAMESPACE}],
    }


def bound_secret(spec: GrantSpec) -> Manifest:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {
            "name": spec.secret_name, "namespace": PORTAL_NAMESPACE,
            "labels": {**_labels(spec), GRANT_ID: str(spec.grant_id)},
            "annotations": {EXPIRES_AT: spec.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")},
        },
    }


def grant_objects(spec: GrantSpec) -> list[Manifest]:
    """Everything a grant needs before its TokenRequest, in apply order."""
    return [portal_namespace(), service_account(spec), role_binding(spec), bound_secret(spec)]


def admin_endpoint(admin_kubeconfig_yaml: str) -> tuple[str, str | None]:
    """The server and CA data of an admin kubeconfig's current context (else its first cluster)."""
    config = yaml.safe_load(admin_kubeconfig_yaml) or {}
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or []}
    if not clusters:
        raise ValueError("the admin kubeconfig names no cluster")
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    current = contexts.get(config.get("current-context"), {}).get("cluster")
    cluster = clusters.get(current) or next(iter(clusters.values()))
    return str(cluster.get("server") or ""), cluster.get("certificate-authority-data")


def kubeconfig(spec: KubeconfigSpec) -> Manifest:
    cluster: dict[str, Any] = {"server": spec.server}
    if spec.ca_data:
        cluster["certificate-authority-data"] = spec.ca_data
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": spec.cluster, "cluster": cluster}],
        "users": [{"name": spec.user, "user": {"token": spec.token}}],
        "contexts": [{"name": spec.context, "context": {
            "cluster": spec.cluster, "user": spec.user, "namespace": spec.namespace}}],
        "current-context": spec.context,
        "preferences": {},
    }


def kubeconfig_yaml(spec: KubeconfigSpec) -> str:
    header = "".join(f"# {line}\n" for line in spec.notice)
    return header + yaml.safe_dump(kubeconfig(spec), sort_keys=False, default_flow_style=False)
