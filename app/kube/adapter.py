"""``KubePort`` over HTTP with the official ``kubernetes`` client.

Requests go through ``ApiClient.param_serialize``/``call_api`` with plain dicts: the kind
registry gives the REST paths, so any kind (custom resources included) needs no generated
model and no discovery round-trips.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config
from kubernetes.client import rest as k8s_rest

from app.kube.errors import (
    ApplyConflictError,
    KubeError,
    PermanentKubeError,
    TransientKubeError,
)
from app.kube.port import (
    CSR,
    FIELD_MANAGER,
    MIN_TOKEN_EXPIRATION_SECONDS,
    Manifest,
    ObjectRef,
    kind_info,
    matches_fields,
    matches_labels,
    selector_text,
    with_decision,
)
from app.kube.retry import RetryPolicy, TokenBucket, parse_retry_after

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
JSON_CONTENT_TYPE = "application/json"
LIST_PAGE_SIZE = 500
# The Status cause of a write refused because its namespace is being deleted.
NAMESPACE_TERMINATING = "NamespaceTerminating"
# Fallback reasons when the server sends no Status body (e.g. a proxy answered).
_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
}
Query = list[tuple[str, str]]
# How kube-apiserver answers (500, not 422) an applied field whose type the schema refuses.
_TYPED_PATCH = "failed to create typed patch object"
# The config loaders are untyped; going through Any keeps mypy strict elsewhere.
k8s_config: Any = _k8s_config


class KubernetesAdapter:
    """Thread-safe ``KubePort`` implementation with client-side rate limit and retries.

    The rate limit is one token bucket per adapter, shared by every thread that uses it (the
    worker's cluster reconciles run on a pool and share the host's adapter)."""

    def __init__(
        self,
        api_client: Any,
        *,
        qps: float = 20.0,
        burst: int = 40,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        connections: int | None = None,
    ) -> None:
        if connections is not None:
            # Threads beyond the pool's size would each open (and drop) a TLS connection.
            api_client.configuration.connection_pool_maxsize = max(
                connections, api_client.configuration.connection_pool_maxsize or 0)
        self._client = _without_urllib3_retries(api_client)
        self._bucket = TokenBucket(qps, burst, sleep=sleep)
        self._retry = retry or RetryPolicy()
        self._timeout = timeout_seconds
        self._sleep = sleep
        self._count_lock = threading.Lock()
        self.api_calls = 0

    # ----- construction

    @classmethod
    def from_kubeconfig(
        cls, path: str, context: str | None = None, **options: Any
    ) -> KubernetesAdapter:
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration,
            persist_config=False,
        )
        return cls(k8s_client.ApiClient(configuration), **options)

    @classmethod
    def from_kubeconfig_yaml(
        cls, kubeconfig_yaml: str, context: str | None = None, **options: Any
    ) -> KubernetesAdapter:
        """For a virtual cluster, whose admin kubeconfig is kept (encrypted) in the database."""
        return cls(_api_client_from_yaml(kubeconfig_yaml, context), **options)

    @classmethod
    def from_in_cluster(cls, **options: Any) -> KubernetesAdapter:
        configuration = k8s_client.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
        return cls(k8s_client.ApiClient(configuration), **options)

    @classmethod
    def from_host(cls, url: str, **options: Any) -> KubernetesAdapter:
        """Unauthenticated plain HTTP, for the test emulator."""
        configuration = k8s_client.Configuration(host=url.rstrip("/"))
        return cls(k8s_client.ApiClient(configuration), **options)

    def close(self) -> None:
        self._client.close()

    # ----- the port

    def apply(self, obj: Manifest, *, force: bool = False,
              manager: str = FIELD_MANAGER) -> Manifest:
        ref = ObjectRef.of(obj)
        query: Query = [("fieldManager", manager), ("force", "true" if force else "false")]
        path = ref.info.object_path(ref.name, ref.namespace)
        _, body = self._call("PATCH", path, query, body=obj, content_type=APPLY_CONTENT_TYPE)
        return body

    def apply_status(self, obj: Manifest, *, manager: str = FIELD_MANAGER) -> Manifest:
        """Server-side apply to the status subresource (what a kubelet or controller reports)."""
        ref = ObjectRef.of(obj)
        query: Query = [("fieldManager", manager), ("force", "true")]
        path = ref.info.object_path(ref.name, ref.namespace) + "/status"
        _, body = self._call("PATCH", path, query, body=obj, content_type=APPLY_CONTENT_TYPE)
        return body

    def dry_run_apply(self, obj: Manifest) -> Manifest:
        ref = ObjectRef.of(obj)
        query: Query = [("fieldManager", FIELD_MANAGER), ("force", "true"), ("dryRun", "All")]
        path = ref.info.object_path(ref.name, ref.namespace)
        _, body = self._call("PATCH", path, query, body=obj, content_type=APPLY_CONTENT_TYPE)
        return body

    def server_version(self) -> str:
        _, body = self._call("GET", "/version")
        return str(body.get("gitVersion") or "")

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Manifest | None:
        path = kind_info(api_version, kind).object_path(name, namespace)
        status, body = self._call("GET", path, accept={404})
        return None if status == 404 else body

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        field_selector: Mapping[str, str] | None = None,
    ) -> list[Manifest]:
        path = kind_info(api_version, kind).collection_path(namespace)
        base: Query = [("limit", str(LIST_PAGE_SIZE))]
        if label_selector:
            base.append(("labelSelector", selector_text(label_selector)))
        if field_selector:
            base.append(("fieldSelector", selector_text(field_selector)))
        items: list[Manifest] = []
        continue_token: str | None = None
        while True:
            query = base + ([("continue", continue_token)] if continue_token else [])
            _, body = self._call("GET", path, query)
            items.extend(body.get("items") or [])
            continue_token = (body.get("metadata") or {}).get("continue")
            if not continue_token:
                break
        for item in items:  # the API server omits these on list items
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        # Servers without selector support (the test emulator) would return everything.
        return [item for item in items
                if matches_labels(item, label_selector) and matches_fields(item, field_selector)]

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None,
        *, grace_period_seconds: int | None = None,
    ) -> bool:
        path = kind_info(api_version, kind).object_path(name, namespace)
        query: Query = ([] if grace_period_seconds is None
                        else [("gracePeriodSeconds", str(grace_period_seconds))])
        status, _ = self._call("DELETE", path, query, accept={404})
        return status != 404

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
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if bound_secret is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Secret", "name": bound_secret}
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = kind_info("v1", "ServiceAccount").object_path(service_account, namespace)
        _, body = self._call("POST", f"{path}/token", body=request)
        token = (body.get("status") or {}).get("token")
        if not token:
            raise PermanentKubeError("TokenRequest returned no token", reason="NoToken")
        return str(token)

    def decide_csr(self, name: str, *, approve: bool, reason: str, message: str) -> Manifest:
        """Approves or denies a CSR through its ``approval`` subresource (a PUT of the object
        as read, so a CSR changed meanwhile is a 409, retried by the reconciler's next pass)."""
        path = kind_info(*CSR).object_path(name)
        _, current = self._call("GET", path)
        decided = with_decision(current, approve=approve, reason=reason, message=message)
        _, stored = self._call("PUT", f"{path}/approval", body=decided)
        return stored

    # ----- transport

    def _call(
        self,
        method: str,
        path: str,
        query: Query | None = None,
        *,
        body: Manifest | None = None,
        content_type: str = JSON_CONTENT_TYPE,
        accept: frozenset[int] | set[int] = frozenset(),
    ) -> tuple[int, Manifest]:
        """One logical request: retried on transient failures, then classified."""
        last: TransientKubeError | None = None
        for attempt in range(1, self._retry.attempts + 1):
            if last is not None:
                self._sleep(last.delay_seconds or 0.0)
            try:
                return self._attempt(method, path, query, body, content_type, accept)
            except TransientKubeError as exc:
                if exc.delay_seconds is not None and exc.delay_seconds > self._retry.max_delay:
                    raise  # the server asks for a long pause: let the reconciler reschedule
                if exc.delay_seconds is None:
                    exc.delay_seconds = self._retry.backoff(attempt)
                last = exc
        assert last is not None
        raise last

    def _attempt(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: Manifest | None,
        content_type: str,
        accept: frozenset[int] | set[int],
    ) -> tuple[int, Manifest]:
        self._bucket.acquire()
        with self._count_lock:
            self.api_calls += 1
        headers = {"Accept": JSON_CONTENT_TYPE, "Content-Type": content_type}
        request = self._client.param_serialize(
            method, path, query_params=query or None, header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._client.call_api(*request, _request_timeout=self._timeout)
            response.read()
        except (urllib3.exceptions.HTTPError, OSError, k8s_client.ApiException) as exc:
            raise TransientKubeError(
                f"{method} {path}: {exc}", reason="ConnectionError"
            ) from exc
        status = int(response.status)
        parsed = _json_body(response.data)
        if status < 400 or status in accept:
            return status, parsed
        raise _classify(status, parsed, response.getheader("Retry-After"), method, content_type)


def _classify(
    status: int, body: Manifest, retry_after: str | None, method: str, content_type: str
) -> KubeError:
    reason = str(body.get("reason") or _REASONS.get(status, f"HTTP{status}"))
    message = str(body.get("message") or f"{method} answered {status} {reason}")
    delay = parse_retry_after(retry_after)
    if status == 403 and NAMESPACE_TERMINATING in _causes(body):
        # Writing into a namespace that is being deleted: refused only until it is gone.
        return TransientKubeError(message, reason=NAMESPACE_TERMINATING, status=status)
    if status == 409 and content_type == APPLY_CONTENT_TYPE:
        return ApplyConflictError(message, status=status)
    if status == 500 and content_type == APPLY_CONTENT_TYPE and _TYPED_PATCH in message:
        # A field of the wrong type under server-side apply: the same body always fails.
        return PermanentKubeError(message, reason="Invalid", status=status)
    if status in (409, 429) or status >= 500:
        return TransientKubeError(message, delay_seconds=delay, reason=reason, status=status)
    return PermanentKubeError(message, reason=reason, status=status)


def _causes(body: Manifest) -> set[str]:
    """The ``reason`` of each cause in a Status body's details."""
    details = body.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    return {str(c.get("reason")) for c in causes or [] if isinstance(c, dict)}


def _json_body(data: bytes | None) -> Manifest:
    if not data:
        return {}
    try:
        parsed = json.loads(data)
    except ValueError:
        return {"message": data[:500].decode("utf-8", "replace")}
    return parsed if isinstance(parsed, dict) else {}


def _without_urllib3_retries(api_client: Any) -> Any:
    """Retries are ours (bounded, jittered, reported as TransientKubeError). urllib3's
    default would silently retry, even sleep out a 429's Retry-After, and skew ``api_calls``;
    its pool reads the setting once, so the REST client is rebuilt."""
    api_client.configuration.retries = False
    api_client.rest_client = k8s_rest.RESTClientObject(api_client.configuration)
    return api_client


def _api_client_from_yaml(kubeconfig_yaml: str, context: str | None = None) -> Any:
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config_from_dict(
        yaml.safe_load(kubeconfig_yaml), context=context,
        client_configuration=configuration, persist_config=False,
    )
    return k8s_client.ApiClient(configuration)


def readyz(kubeconfig_yaml: str, *, timeout_seconds: float = 5.0) -> bool:
    """Whether the cluster behind an (admin) kubeconfig answers ``GET /readyz`` with 200.

    One attempt, no retries: callers poll. Any failure, including a bad kubeconfig, is
    simply "not ready yet".
    """
    try:
        api_client = _api_client_from_yaml(kubeconfig_yaml)
    except Exception:  # an unparsable kubeconfig is "not ready yet", not a crash
        return False
    api_client = _without_urllib3_retries(api_client)
    try:
        request = api_client.param_serialize(
            "GET", "/readyz", header_params={"Accept": "text/plain"},
            auth_settings=["BearerToken"],
        )
        response = api_client.call_api(*request, _request_timeout=timeout_seconds)
        response.read()
        return int(response.status) == 200
    except (urllib3.exceptions.HTTPError, OSError, k8s_client.ApiException):
        return False
    finally:
        api_client.close()
