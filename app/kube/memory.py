"""A dict-backed ``KubePort`` for fast tests, with fault injection and a call log.

It approximates the API server where reconcilers depend on it: server-side apply merges
the applied configuration and drops fields this manager applied before but no longer
applies (so un-labelling a node works), conflicts on fields another writer set, no-op
applies leave ``resourceVersion`` alone, namespaced writes need the namespace, deleting
a namespace removes what is in it, and tokens die with their Secret or ServiceAccount.
With ``normalize_quantities`` it also stores resource quantities in canonical form, as a real
API server does (``524288Mi`` reads back as ``512Gi``).
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import secrets
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from app.kube.errors import ApplyConflictError, PermanentKubeError, TransientKubeError
from app.kube.port import (
    CSR,
    MIN_TOKEN_EXPIRATION_SECONDS,
    Manifest,
    ObjectRef,
    kind_info,
    matches_fields,
    matches_labels,
    with_decision,
)
from app.kube.quantities import canonical_quantities

# Lists merged item by item (keyed), as the API schema declares them; other lists are atomic.
ASSOCIATIVE_LISTS: dict[str, tuple[str, ...]] = {
    "taints": ("key", "effect"),
    "containers": ("name",),
    "initContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "conditions": ("type",),
}
SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")


def server_side_apply(
    live: Manifest | None, previous: Manifest | None, desired: Manifest, *, force: bool
) -> Manifest:
    """Merge an applied configuration into the live object, approximating SSA for one manager.

    ``previous`` is what this manager applied last time (its owned fields). Fields set by
    someone else to a different value are conflicts unless ``force``.
    """
    desired = strip_server_metadata(desired)
    if live is None:
        return desired
    merge = _Merge()
    merged: Manifest = merge.value(live, previous or {}, desired, ())
    if merge.conflicts and not force:
        raise ApplyConflictError(
            "Apply failed with conflicts on fields set by another manager: "
            + ", ".join(merge.conflicts)
        )
    return merged


def strip_server_metadata(obj: Mapping[str, Any]) -> Manifest:
    result = copy.deepcopy(dict(obj))
    meta = result.get("metadata") or {}
    for key in SERVER_METADATA:
        meta.pop(key, None)
    return result


@dataclass
class _Merge:
    conflicts: list[str] = field(default_factory=list)

    def value(self, live: Any, previous: Any, desired: Any, path: tuple[str, ...]) -> Any:
        if isinstance(desired, dict) and isinstance(live, dict):
            return self.mapping(live, previous if isinstance(previous, dict) else {}, desired, path)
        keys = ASSOCIATIVE_LISTS.get(path[-1]) if path else None
        if keys and isinstance(desired, list) and isinstance(live, list):
            prev_items = previous if isinstance(previous, list) else []
            return self.keyed_list(live, prev_items, desired, keys, path)
        if live is not None and previous is None and live != desired:
            self.conflicts.append(".".join(path))
        return copy.deepcopy(desired)

    def mapping(
        self, live: dict[str, Any], previous: dict[str, Any], desired: dict[str, Any],
        path: tuple[str, ...],
    ) -> dict[str, Any]:
        result = dict(live)
        for key in previous.keys() - desired.keys():
            released = _release(result.get(key), previous[key], (*path, key))
            if released is _GONE:
                result.pop(key, None)
            else:
                result[key] = released
        for key, value in desired.items():
            result[key] = self.value(live.get(key), previous.get(key), value, (*path, key))
        return result

    def keyed_list(
        self, live: list[Any], previous: list[Any], desired: list[Any], keys: tuple[str, ...],
        path: tuple[str, ...],
    ) -> list[Any]:
        owned = {_identity(item, keys): item for item in previous}
        wanted = {_identity(item, keys): item for item in desired}
        result: list[Any] = []
        for item in live:
            item_id = _identity(item, keys)
            if item_id in wanted:
                sub_path = (*path, "=".join(str(part) for part in item_id))
                result.append(self.value(item, owned.get(item_id), wanted.pop(item_id), sub_path))
            elif item_id not in owned:
                result.append(item)
        result.extend(copy.deepcopy(item) for item in wanted.values())
        return result


_GONE: Any = object()


def _release(live: Any, previous: Any, path: tuple[str, ...]) -> Any:
    """What remains of ``live`` once this manager stops applying ``previous``: the fields it
    applied go, fields others set stay (e.g. a node keeps its GPU labels)."""
    if live is None:
        return _GONE
    if isinstance(live, dict) and isinstance(previous, dict):
        result = dict(live)
        for key, owned in previous.items():
            released = _release(result.get(key), owned, (*path, key))
            if released is _GONE:
                result.pop(key, None)
            else:
                result[key] = released
        return result or _GONE
    keys = ASSOCIATIVE_LISTS.get(path[-1]) if path else None
    if keys and isinstance(live, list) and isinstance(previous, list):
        owned_ids = {_identity(item, keys) for item in previous}
        return [item for item in live if _identity(item, keys) not in owned_ids]
    return _GONE


def _identity(item: Any, keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(item.get(k) for k in keys) if isinstance(item, dict) else (item,)


@dataclass
class KubeCall:
    """One call through the port, as recorded by the fake."""

    method: str
    api_version: str
    kind: str
    name: str | None
    namespace: str | None
    body: Manifest | None = None
    changed: bool = False


@dataclass(frozen=True)
class IssuedToken:
    token: str
    namespace: str
    service_account: str
    bound_secret: str | None
    expiration_seconds: int
    expires_at: datetime


@dataclass
class _Fault:
    method: str
    error: BaseException
    times: int
    match: Callable[[KubeCall], bool] | None
    skip: int

    def fires(self, call: KubeCall) -> bool:
        if self.times <= 0 or self.method not in ("*", call.method):
            return False
        if self.match is not None and not self.match(call):
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        self.times -= 1
        return True


class InMemoryKube:
    """``KubePort`` backed by dicts. Thread-safe enough for parallel service tests."""

    WRITE_METHODS = frozenset({"apply", "delete", "request_token", "decide_csr"})

    def __init__(self, namespaces: tuple[str, ...] = DEFAULT_NAMESPACES, *,
                 normalize_quantities: bool = False) -> None:
        self.normalize_quantities = normalize_quantities
        self.calls: list[KubeCall] = []
        self.tokens: list[IssuedToken] = []
        self._objects: dict[ObjectRef, Manifest] = {}
        self._applied: dict[ObjectRef, Manifest] = {}
        self._faults: list[_Fault] = []
        self._versions = itertools.count(1)
        self._lock = threading.RLock()
        for name in namespaces:
            self.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # ----- fault injection and inspection (test helpers, not part of the port)

    def inject(
        self,
        method: str,
        error: BaseException,
        times: int = 1,
        match: Callable[[KubeCall], bool] | None = None,
        *,
        after: int = 0,
    ) -> None:
        """Make the next ``times`` matching calls of ``method`` (or ``"*"``) raise ``error``,
        after letting ``after`` matching calls through. ``OSError``/``TimeoutError`` come out
        as ``TransientKubeError``, as the adapter reports them once its retries are spent."""
        with self._lock:
            self._faults.append(_Fault(method, error, times, match, after))

    def seed(self, obj: Manifest) -> Manifest:
        """Store an object as if another writer had created it (this manager owns nothing)."""
        with self._lock:
            ref = ObjectRef.of(obj)
            stored = self._stamp(self._as_stored(strip_server_metadata(obj)), None, ref)
            self._objects[ref] = stored
            return copy.deepcopy(stored)

    def seed_status(self, api_version: str, kind: str, name: str, namespace: str | None,
                    status: Manifest) -> Manifest:
        """Set the status of a stored object as its controller would (through the status
        subresource): spec and the portal's applied fields stay; generation stays too."""
        with self._lock:
            ref = self._ref(api_version, kind, name, namespace)
            self._require_exists(ref)
            live = self._objects[ref]
            updated = {**copy.deepcopy(live), "status": copy.deepcopy(status)}
            self._objects[ref] = self._stamp(updated, live, ref)
            return copy.deepcopy(self._objects[ref])

    def mutations(self) -> list[KubeCall]:
        """Calls that changed stored state: a second reconcile of a converged object has none."""
        return [call for call in self.calls if call.changed]

    def writes(self) -> list[KubeCall]:
        return [call for call in self.calls if call.method in self.WRITE_METHODS]

    def reset_calls(self) -> None:
        with self._lock:
            self.calls.clear()

    def objects(self, kind: str | None = None) -> list[Manifest]:
        with self._lock:
            found = [o for ref, o in self._objects.items() if kind in (None, ref.kind)]
            return copy.deepcopy(found)

    def token_valid(self, token: str) -> bool:
        """Whether an issued token still authenticates: not expired, and its ServiceAccount
        and bound Secret still exist (the API server's rule for bound tokens)."""
        with self._lock:
            issued = next((t for t in self.tokens if t.token == token), None)
            if issued is None or issued.expires_at <= datetime.now(UTC):
                return False
            sa = ObjectRef("v1", "ServiceAccount", issued.service_account, issued.namespace)
            if sa not in self._objects:
                return False
            if issued.bound_secret is None:
                return True
            return ObjectRef("v1", "Secret", issued.bound_secret, issued.namespace) in self._objects

    # ----- the port

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        ref = ObjectRef.of(obj)
        with self._lock:
            call = self._record("apply", ref, body=copy.deepcopy(obj))
            self._require_namespace(ref)
            live = self._objects.get(ref)
            merged = self._as_stored(
                server_side_apply(live, self._applied.get(ref), obj, force=force))
            self._applied[ref] = strip_server_metadata(obj)
            if live is not None and same_content(live, merged):
                return copy.deepcopy(live)
            self._objects[ref] = self._stamp(merged, live, ref)
            call.changed = True
            return copy.deepcopy(self._objects[ref])

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Manifest | None:
        ref = self._ref(api_version, kind, name, namespace)
        with self._lock:
            self._record("get", ref)
            found = self._objects.get(ref)
            return copy.deepcopy(found) if found is not None else None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
    ) -> list[Manifest]:
        kind_info(api_version, kind)
        with self._lock:
            self.calls.append(KubeCall("list", api_version, kind, None, namespace))
            self._raise_injected(self.calls[-1])
            return [
                copy.deepcopy(obj)
                for ref, obj in sorted(self._objects.items(), key=lambda item: _sort_key(item[0]))
                if (ref.api_version, ref.kind) == (api_version, kind)
                and namespace in (None, ref.namespace)
                and matches_labels(obj, label_selector)
                and matches_fields(obj, field_selector)
            ]

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> bool:
        ref = self._ref(api_version, kind, name, namespace)
        with self._lock:
            call = self._record("delete", ref)
            if ref not in self._objects:
                return False
            self._remove(ref)
            if kind == "Namespace" and api_version == "v1":
                for contained in [r for r in self._objects if r.namespace == name]:
                    self._remove(contained)
            call.changed = True
            return True

    def decide_csr(self, name: str, *, approve: bool, reason: str, message: str) -> Manifest:
        ref = self._ref(CSR[0], CSR[1], name, None)
        with self._lock:
            call = self._record("decide_csr", ref)
            self._require_exists(ref)
            live = self._objects[ref]
            decided = with_decision(live, approve=approve, reason=reason, message=message)
            if decided != live:
                self._objects[ref] = self._stamp(copy.deepcopy(decided), live, ref)
                call.changed = True
            return copy.deepcopy(self._objects[ref])

    def request_token(
        self,
        namespace: str,
        service_account: str,
        *,
        expiration_seconds: int,
        bound_secret: str | None,
    ) -> str:
        if expiration_seconds < MIN_TOKEN_EXPIRATION_SECONDS:
            raise ValueError(f"expiration_seconds must be >= {MIN_TOKEN_EXPIRATION_SECONDS}")
        sa_ref = ObjectRef("v1", "ServiceAccount", service_account, namespace)
        with self._lock:
            call = self._record("request_token", sa_ref)
            self._require_exists(sa_ref)
            if bound_secret is not None:
                self._require_exists(ObjectRef("v1", "Secret", bound_secret, namespace))
            token = fake_service_account_token(
                namespace, service_account, bound_secret, expiration_seconds
            )
            expires_at = datetime.now(UTC) + timedelta(seconds=expiration_seconds)
            self.tokens.append(
                IssuedToken(token, namespace, service_account, bound_secret,
                            expiration_seconds, expires_at)
            )
            call.changed = True
            return token

    # ----- internals

    def _ref(self, api_version: str, kind: str, name: str, namespace: str | None) -> ObjectRef:
        info = kind_info(api_version, kind)
        if info.namespaced and not namespace:
            raise ValueError(f"{kind} is namespaced: a namespace is required")
        return ObjectRef(api_version, kind, name, namespace if info.namespaced else None)

    def _record(self, method: str, ref: ObjectRef, body: Manifest | None = None) -> KubeCall:
        call = KubeCall(method, ref.api_version, ref.kind, ref.name, ref.namespace, body)
        self.calls.append(call)
        self._raise_injected(call)
        return call

    def _raise_injected(self, call: KubeCall) -> None:
        fault = next((f for f in self._faults if f.fires(call)), None)
        if fault is None:
            return
        if isinstance(fault.error, OSError | TimeoutError):
            raise TransientKubeError(
                f"connection failed: {fault.error!r}", reason="ConnectionError"
            ) from fault.error
        raise fault.error

    def _require_namespace(self, ref: ObjectRef) -> None:
        if ref.namespace is not None:
            self._require_exists(ObjectRef("v1", "Namespace", ref.namespace))

    def _require_exists(self, ref: ObjectRef) -> None:
        if ref not in self._objects:
            raise PermanentKubeError(
                f'{ref.kind.lower()}s "{ref.name}" not found', reason="NotFound", status=404
            )

    def _as_stored(self, obj: Manifest) -> Manifest:
        return canonical_quantities(obj) if self.normalize_quantities else obj

    def _stamp(self, obj: Manifest, live: Manifest | None, ref: ObjectRef) -> Manifest:
        return stamp_metadata(obj, live, ref.namespace, str(next(self._versions)))

    def _remove(self, ref: ObjectRef) -> None:
        self._objects.pop(ref, None)
        self._applied.pop(ref, None)

def stamp_metadata(
    obj: Manifest, live: Manifest | None, namespace: str | None, resource_version: str
) -> Manifest:
    """Fill in what the API server owns: uid, creationTimestamp, generation (bumped when
    anything but metadata/status changed), resourceVersion, and the namespace from the URL."""
    meta = obj.setdefault("metadata", {})
    if namespace is not None:
        meta["namespace"] = namespace
    if live is None:
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
    else:
        old = live.get("metadata") or {}
        for key in ("uid", "creationTimestamp"):
            meta[key] = old.get(key)
        generation = int(old.get("generation") or 1)
        meta["generation"] = generation + (_spec_of(obj) != _spec_of(live))
    meta["resourceVersion"] = resource_version
    return obj


def same_content(live: Manifest, merged: Manifest) -> bool:
    return strip_server_metadata(live) == strip_server_metadata(merged)


def _spec_of(obj: Manifest) -> Manifest:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _sort_key(ref: ObjectRef) -> tuple[str, str]:
    return (ref.namespace or "", ref.name)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def fake_service_account_token(
    namespace: str, sa: str, secret: str | None, expiration_seconds: int
) -> str:
    """Looks like a ServiceAccount JWT (three base64url parts); the signature is random."""
    now = int(datetime.now(UTC).timestamp())
    claims: dict[str, Any] = {
        "iss": "https://kubernetes.default.svc",
        "sub": f"system:serviceaccount:{namespace}:{sa}",
        "iat": now,
        "exp": now + expiration_seconds,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": sa}},
    }
    if secret is not None:
        claims["kubernetes.io"]["secret"] = {"name": secret}
    header = _b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
    return f"{header}.{_b64(json.dumps(claims).encode())}.{_b64(secrets.token_bytes(32))}"
