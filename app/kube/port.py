"""The narrow Kubernetes interface the reconcilers depend on, and the kinds it knows.

Objects are plain manifest dicts. Implementations: ``KubernetesAdapter`` (real API over
HTTP) and ``InMemoryKube`` (dict-backed fake with fault injection).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

Manifest = dict[str, Any]

FIELD_MANAGER = "gpu-tenant-portal"
# The API server refuses shorter TokenRequests; failing early gives a clearer error.
MIN_TOKEN_EXPIRATION_SECONDS = 600


def release(port: object) -> None:
    """Closes a client made for one pass, so its connections are not kept for the next; a
    port with nothing to close (the in-memory one) is left as it is."""
    close = getattr(port, "close", None)
    if callable(close):
        close()


class KubePort(Protocol):
    """What reconcilers may do on a cluster. Every method raises only ``KubeError``s
    (plus ``ValueError`` for programming errors such as an unknown kind)."""

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        """Server-side apply ``obj`` as ``FIELD_MANAGER``; return the object as stored."""
        ...

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Manifest | None:
        """The stored object, or ``None`` when it does not exist."""
        ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
    ) -> list[Manifest]:
        """Objects of a kind (in one namespace, or all), filtered by equality selectors: labels,
        and fields the server can select on (``spec.nodeName``, ``status.phase`` of pods)."""
        ...

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> bool:
        """Delete; ``False`` when it was already absent."""
        ...

    def request_token(
        self,
        namespace: str,
        service_account: str,
        *,
        expiration_seconds: int,
        bound_secret: str | None,
    ) -> str:
        """Issue a ServiceAccount token (TokenRequest), bound to a Secret when given, so
        that deleting the Secret revokes exactly this token."""
        ...


CSR = ("certificates.k8s.io/v1", "CertificateSigningRequest")


@runtime_checkable
class CsrDecider(Protocol):
    """Approving or denying a CertificateSigningRequest (its ``approval`` subresource): what
    the machines kind does with a kubelet's first client certificate request."""

    def decide_csr(self, name: str, *, approve: bool, reason: str, message: str) -> Manifest:
        """Adds the Approved (or Denied) condition; the CSR as stored after."""
        ...


def with_decision(csr: Manifest, *, approve: bool, reason: str, message: str) -> Manifest:
    """The CSR with the decision's condition added (one decision: a decided CSR is kept)."""
    status = dict(csr.get("status") or {})
    conditions = list(status.get("conditions") or [])
    if not any(c.get("type") in ("Approved", "Denied") for c in conditions):
        conditions.append({"type": "Approved" if approve else "Denied", "status": "True",
                           "reason": reason, "message": message})
    return {**csr, "status": {**status, "conditions": conditions}}


@runtime_checkable
class HostProbe(Protocol):
    """Questions a template's validation asks a host cluster; ``apply`` only for the one
    namespace the dry-runs go in."""

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest: ...

    def dry_run_apply(self, obj: Manifest) -> Manifest:
        """Server-side apply ``obj`` with ``dryRun=All``: admission and schema run, nothing is
        stored; the object as it would be stored comes back."""
        ...

    def server_version(self) -> str:
        """The API server's ``gitVersion``, e.g. ``v1.32.13``."""
        ...


@dataclass(frozen=True)
class KindInfo:
    """Where a kind lives in the REST API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def collection_path(self, namespace: str | None = None) -> str:
        """The collection in one namespace, or across all namespaces when ``None``."""
        prefix = f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"
        if self.namespaced and namespace:
            return f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None) -> str:
        if self.namespaced and not namespace:
            raise ValueError(f"{self.kind} is namespaced: a namespace is required")
        return f"{self.collection_path(namespace)}/{name}"


@dataclass(frozen=True)
class ObjectRef:
    """Identity of one object, as the port's methods and the fake's call log use it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not obj.get("apiVersion") or not obj.get("kind") or not name:
            raise ValueError("a manifest needs apiVersion, kind and metadata.name")
        info = kind_info(obj["apiVersion"], obj["kind"])
        namespace = meta.get("namespace") if info.namespaced else None
        if info.namespaced and not namespace:
            raise ValueError(f"{obj['kind']} {name} is namespaced: metadata.namespace is required")
        return cls(obj["apiVersion"], obj["kind"], name, namespace)

    @property
    def info(self) -> KindInfo:
        return kind_info(self.api_version, self.kind)


_KINDS: dict[tuple[str, str], KindInfo] = {}


def register_kind(api_version: str, kind: str, plural: str, *, namespaced: bool) -> KindInfo:
    """Teach the port another kind (e.g. a new custom resource)."""
    info = KindInfo(api_version, kind, plural, namespaced)
    _KINDS[(api_version, kind)] = info
    return info


def kind_info(api_version: str, kind: str) -> KindInfo:
    try:
        return _KINDS[(api_version, kind)]
    except KeyError:
        raise ValueError(f"unknown kind {api_version} {kind}; register_kind() it first") from None


def known_kinds() -> list[KindInfo]:
    return list(_KINDS.values())


def matches_labels(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    """Equality-based label selector, as ``-l a=b,c=d``."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def matches_fields(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    """Equality-based field selector on dotted paths, as ``--field-selector a.b=c``."""
    if not selector:
        return True
    return all(_field(obj, path) == value for path, value in selector.items())


def _field(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def selector_text(selector: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _register_builtins() -> None:
    for api_version, kind, plural, namespaced in [
        ("v1", "Namespace", "namespaces", False),
        ("v1", "Node", "nodes", False),
        ("v1", "Secret", "secrets", True),
        ("v1", "ConfigMap", "configmaps", True),
        ("v1", "ServiceAccount", "serviceaccounts", True),
        ("v1", "Service", "services", True),
        ("v1", "Endpoints", "endpoints", True),
        ("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", True),
        ("v1", "Pod", "pods", True),
        ("v1", "ResourceQuota", "resourcequotas", True),
        ("v1", "Event", "events", True),
        ("v1", "LimitRange", "limitranges", True),
        ("apps/v1", "Deployment", "deployments", True),
        ("apps/v1", "StatefulSet", "statefulsets", True),
        ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True),
        ("rbac.authorization.k8s.io/v1", "Role", "roles", True),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
        ("scheduling.run.ai/v2", "Queue", "queues", False),
        ("metal3.io/v1alpha1", "BareMetalHost", "baremetalhosts", True),
        ("certificates.k8s.io/v1", "CertificateSigningRequest", "certificatesigningrequests",
         False),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
         "validatingadmissionpolicies", False),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding",
         "validatingadmissionpolicybindings", False),
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
         "mutatingwebhookconfigurations", False),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions",
         False),
    ]:
        register_kind(api_version, kind, plural, namespaced=namespaced)


_register_builtins()
