"""A stateful Kubernetes API on loopback for the synchronous official client.

kmock 0.8's ``KubernetesEmulator`` keeps objects and serves create/get/list/patch/delete.
``_CompatEmulator`` is the thin layer that closes the gaps listed in
../shared/reference/kube-emulator-notes.md; it overrides kmock's private ``__call__``,
``_handle`` and ``_serve_list`` and touches ``_objects``/``_lock``/``_buses``, which is why
kmock is pinned exactly. ``KubeEmulator`` runs it on an asyncio loop in a thread.

What the layer adds, each for a client-visible reason:
- ``/api/v1/namespaces[/name]`` as the cluster-scoped Namespace resource (kmock reads it as a
  namespace prefix), and deleting a Namespace deletes what is in it;
- trailing-slash discovery paths, ``/readyz`` and ``/livez``;
- 201 on create; uid, resourceVersion, generation, creationTimestamp and metadata.namespace;
  ``kind``/``apiVersion`` on lists; discovery for every kind in ``app.kube.port``;
- server-side apply (``application/apply-patch+yaml``): creates when absent, merges with
  ``app.kube.memory.server_side_apply`` (the fake's approximation, conflicts included),
  leaves a no-op apply unchanged; namespaced writes need their namespace (404);
- ``POST .../serviceaccounts/{name}/token`` answering a TokenRequest;
- HTTP fault injection (``fail``) for retry tests.
Still not emulated: label/field selectors (clients filter), PUT, admission, RBAC, quota.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import re
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import attrs
import kmock
from kmock._internal import enums, rendering

from app.kube.errors import ApplyConflictError
from app.kube.memory import (
    fake_service_account_token,
    same_content,
    server_side_apply,
    stamp_metadata,
    strip_server_metadata,
)
from app.kube.port import KindInfo, Manifest, known_kinds

T = TypeVar("T")
Key = tuple[Any, str | None, str]  # kmock's (resource, namespace, name)

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces(?P<rest>(?:/[^/]+)?)$")
# kmock cannot parse /api/v1/namespaces (it reads a namespace prefix), so such requests are
# parsed under this alias path and mapped back to the Namespace resource in _handle().
NAMESPACE_ALIAS = "/api/v1/_namespaces"
NAMESPACE_ALIAS_PATH = re.compile(r"^/api/v1/_namespaces(?P<rest>(?:/[^/]+)?)$")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")
MIN_TOKEN_SECONDS = 600


@dataclass
class HttpFault:
    """The next ``times`` requests matching ``method`` and ``path`` (regex search) fail."""

    method: str | None
    path: str
    status: int
    times: int
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = "InjectedFault"
    message: str = "fault injected by the test"

    def matches(self, request: rendering.Request) -> bool:
        method_ok = self.method is None or self.method.upper() == str(request.method.value)
        return self.times > 0 and method_ok and re.search(self.path, request.url.path) is not None

    def response(self) -> aiohttp.web.StreamResponse:
        return _status_response(self.status, self.reason, self.message, self.headers)


@attrs.define(kw_only=True)
class _CompatEmulator(kmock.KubernetesEmulator):
    faults: list[HttpFault] = attrs.field(factory=list)
    tokens: list[dict[str, Any]] = attrs.field(factory=list)
    applied: dict[Key, Manifest] = attrs.field(factory=dict)
    versions: Any = attrs.field(factory=lambda: itertools.count(1))
    fault_lock: threading.Lock = attrs.field(factory=threading.Lock)

    def declare(self, info: KindInfo) -> None:
        self.resources[self.key_of(info)] = kmock.ResourceInfo(
            kind=info.kind,
            namespaced=info.namespaced,
            singular=info.kind.lower(),
            verbs={"create", "delete", "get", "list", "patch", "watch"},
            subresources={"token"} if info.plural == "serviceaccounts" else set(),
        )

    @staticmethod
    def key_of(info: KindInfo) -> Any:
        return kmock.resource(info.group, info.version, info.plural)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock matches discovery paths exactly; the official client appends a slash.
        path = raw_request.rel_url.path
        new_path = path.rstrip("/") or "/"
        new_path = NAMESPACE_PATH.sub(lambda m: NAMESPACE_ALIAS + m["rest"], new_path)
        if new_path != path:
            rel_url = raw_request.rel_url.with_path(new_path).with_query(raw_request.rel_url.query)
            raw_request = raw_request.clone(rel_url=rel_url)
        response: aiohttp.web.StreamResponse = await super().__call__(raw_request)
        return response

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        request = self._swap(request, _as_namespace_request(request))
        injected = self._take_fault(request)
        if injected is not None:
            return injected
        if request.url.path in ("/readyz", "/livez"):
            return aiohttp.web.Response(text="ok")
        if request.resource is None:
            return await self._base_handle(request)
        if request.subresource == "token" and request.method == enums.method.POST:
            return await self._serve_token(request)
        if request.method == enums.method.PATCH and _is_apply(request):
            return await self._serve_apply(request)
        if request.action == enums.action.CREATE:
            return await self._create(request)
        if request.action == enums.action.UPDATE and isinstance(request.data, dict):
            request.data.setdefault("metadata", {})["resourceVersion"] = self.next_version()
        response = await self._base_handle(request)
        if request.action == enums.action.DELETE and _is_namespace(request.resource):
            await self._delete_contents(str(request.name))
        return response

    async def _base_handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        response: aiohttp.web.StreamResponse = await super()._handle(request)
        return response

    async def _serve_list(self, request: rendering.Request) -> Manifest:
        listing = await super()._serve_list(request)
        assert isinstance(listing, dict)
        info = self._info_of(request.resource)
        if info is not None:
            listing["apiVersion"] = info.api_version
            listing["kind"] = f"{info.kind}List"
        return listing

    # ----- writes

    async def _create(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        data = request.data if isinstance(request.data, dict) else {}
        namespace = request.namespace or (data.get("metadata") or {}).get("namespace")
        await self._require_namespace(request.resource, namespace)
        stamp_metadata(data, None, namespace if self._namespaced(request) else None,
                       self.next_version())
        response = await self._base_handle(request)
        if response.status == 200:
            response.set_status(201)
        return response

    async def _serve_apply(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        desired = request.data if isinstance(request.data, dict) else {}
        if (desired.get("metadata") or {}).get("name") != request.name:
            return _status_response(400, "BadRequest", "metadata.name must match the URL")
        await self._require_namespace(request.resource, request.namespace)
        key: Key = (request.resource, request.namespace, str(request.name))
        force = request.params.get("force") == "true"
        async with self._lock:
            live = self._live(key)
            try:
                merged = server_side_apply(live, self.applied.get(key), desired, force=force)
            except ApplyConflictError as exc:
                return _status_response(409, "Conflict", exc.message)
            self.applied[key] = strip_server_metadata(desired)
            if live is not None and same_content(live, merged):
                return aiohttp.web.json_response(live)
            namespace = request.namespace if self._namespaced(request) else None
            new = stamp_metadata(merged, live, namespace, self.next_version())
            await self._store(key, new, created=live is None)
        return aiohttp.web.json_response(new, status=201 if live is None else 200)

    async def _store(self, key: Key, obj: Manifest, *, created: bool) -> None:
        if key not in self._objects:
            self._objects[key] = obj
        else:
            self._objects[key].history.append(obj)
        event = {"type": "ADDED" if created else "MODIFIED", "object": obj}
        await self._buses[key[0]].put(event)

    async def _delete_contents(self, namespace: str) -> None:
        async with self._lock:
            for (resource, ns, name), obj in list(self._objects.items()):
                if ns == namespace and not obj.deleted:
                    raw = obj.raw
                    obj.delete()
                    self.applied.pop((resource, ns, name), None)
                    await self._buses[resource].put({"type": "DELETED", "object": raw})

    async def _serve_token(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        namespace, name = str(request.namespace), str(request.name)
        spec = (request.data or {}).get("spec") or {}
        seconds = int(spec.get("expirationSeconds") or 3600)
        if seconds < MIN_TOKEN_SECONDS:
            message = "spec.expirationSeconds: may not specify a duration less than 10 minutes"
            return _status_response(422, "Invalid", message)
        if not self._exists("serviceaccounts", namespace, name):
            return _status_response(404, "NotFound", f'serviceaccounts "{name}" not found')
        bound = (spec.get("boundObjectRef") or {}).get("name")
        if bound is not None and not self._exists("secrets", namespace, bound):
            return _status_response(404, "NotFound", f'secrets "{bound}" not found')
        token = fake_service_account_token(namespace, name, bound, seconds)
        expires = (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.tokens.append({"namespace": namespace, "service_account": name,
                            "bound_secret": bound, "expiration_seconds": seconds, "token": token})
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec,
                "status": {"token": token, "expirationTimestamp": expires}}
        return aiohttp.web.json_response(body, status=201)

    # ----- helpers

    def next_version(self) -> str:
        return str(next(self.versions))

    def seed(self, obj: Manifest, info: KindInfo) -> Manifest:
        namespace = (obj.get("metadata") or {}).get("namespace") if info.namespaced else None
        key: Key = (self.key_of(info), namespace, obj["metadata"]["name"])
        stored = stamp_metadata(strip_server_metadata(obj), None, namespace, self.next_version())
        self._objects[key] = stored
        return copy.deepcopy(stored)

    def stored(self, info: KindInfo, name: str, namespace: str | None) -> Manifest | None:
        return self._live((self.key_of(info), namespace if info.namespaced else None, name))

    def _live(self, key: Key) -> Manifest | None:
        if key not in self._objects or self._objects[key].deleted:
            return None
        raw: Manifest = copy.deepcopy(self._objects[key].raw)
        return raw

    def _swap(self, old: rendering.Request, new: rendering.Request) -> rendering.Request:
        # kmock's reactions only see requests recorded in the root, compared by identity.
        if new is not old:
            index = next(i for i in range(len(self._requests) - 1, -1, -1)
                         if self._requests[i] is old)
            self._requests[index] = new
        return new

    def _take_fault(self, request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        with self.fault_lock:
            fault = next((f for f in self.faults if f.matches(request)), None)
            if fault is None:
                return None
            fault.times -= 1
        return fault.response()

    def _exists(self, plural: str, namespace: str | None, name: str) -> bool:
        key: Key = (kmock.resource("", "v1", plural), namespace, name)
        return key in self._objects and not self._objects[key].deleted

    async def _require_namespace(self, resource: Any, namespace: str | None) -> None:
        if not namespace or _is_namespace(resource):
            return
        if not self._exists("namespaces", None, namespace):
            raise kmock.KubernetesError(
                status=404, reason="NotFound", message=f'namespaces "{namespace}" not found',
                details={"name": namespace, "kind": "namespaces"},
            )

    def _namespaced(self, request: rendering.Request) -> bool:
        info = self._info_of(request.resource)
        return bool(info.namespaced) if info is not None else request.namespace is not None

    def _info_of(self, resource: Any) -> KindInfo | None:
        return next((i for i in known_kinds() if self.key_of(i) == resource), None)


def _is_namespace(resource: Any) -> bool:
    return bool(resource == kmock.resource("", "v1", "namespaces"))


def _is_apply(request: rendering.Request) -> bool:
    content_type = {k.lower(): v for k, v in request.headers.items()}.get("content-type", "")
    return content_type.split(";")[0].strip() == APPLY_CONTENT_TYPE


def _as_namespace_request(request: rendering.Request) -> rendering.Request:
    match = NAMESPACE_ALIAS_PATH.match(request.url.path)
    if match is None:
        return request
    rewritten: rendering.Request = attrs.evolve(
        request,
        resource=kmock.resource("", "v1", "namespaces"),
        url=request.url.with_path("/api/v1/namespaces" + match["rest"]).with_query(
            request.url.query
        ),
    )
    return rewritten


def _status_response(
    status: int, reason: str, message: str, headers: dict[str, str] | None = None
) -> aiohttp.web.StreamResponse:
    body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "code": status, "reason": reason, "message": message}
    return aiohttp.web.json_response(body, status=status, headers=headers)


class KubeEmulator:
    """The emulator on ``127.0.0.1:<random>`` with its loop in a daemon thread.

    Test-side helpers run on the emulator's loop, so they never race with requests.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._stack = contextlib.AsyncExitStack()
        self._handler: _CompatEmulator | None = None
        self.url = ""

    def start(self) -> KubeEmulator:
        self._thread.start()
        self._run(self._start())
        for name in DEFAULT_NAMESPACES:
            self.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return self

    def stop(self) -> None:
        self._run(self._stack.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        handler = _CompatEmulator()
        for info in known_kinds():
            handler.declare(info)
        await self._stack.enter_async_context(handler)
        server = await self._stack.enter_async_context(kmock.Server(handler))
        self._handler = handler
        self.url = str(server.url).rstrip("/")

    @property
    def handler(self) -> _CompatEmulator:
        assert self._handler is not None, "the emulator is not started"
        return self._handler

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def _on_loop(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()

        return self._run(call())

    # ----- seeding and inspection

    def seed(self, obj: Manifest) -> Manifest:
        """Store an object as another writer would have created it."""
        from app.kube.port import kind_info

        info = kind_info(obj["apiVersion"], obj["kind"])
        return self._on_loop(lambda: self.handler.seed(obj, info))

    def seed_file(self, path: str | Path) -> list[Manifest]:
        """Seed every object of a JSON file holding one object or a ``*List``."""
        data = json.loads(Path(path).read_text())
        if not data["kind"].endswith("List"):
            return [self.seed(data)]
        kind = data["kind"].removesuffix("List")
        items: list[Manifest] = data.get("items") or []
        return [self.seed({"apiVersion": data["apiVersion"], "kind": kind, **i}) for i in items]

    def stored(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Manifest | None:
        """The object as stored (not through the API), or ``None``."""
        from app.kube.port import kind_info

        info = kind_info(api_version, kind)
        return self._on_loop(lambda: self.handler.stored(info, name, namespace))

    def fail(
        self,
        path: str,
        status: int,
        *,
        method: str | None = None,
        times: int = 1,
        headers: dict[str, str] | None = None,
        reason: str = "InjectedFault",
        message: str = "fault injected by the test",
    ) -> None:
        """The next ``times`` requests whose path matches the regex ``path`` answer ``status``."""
        fault = HttpFault(method, path, status, times, dict(headers or {}), reason, message)
        with self.handler.fault_lock:
            self.handler.faults.append(fault)

    @property
    def tokens(self) -> list[dict[str, Any]]:
        return self._on_loop(lambda: list(self.handler.tokens))

    def requests(self) -> list[tuple[str, str]]:
        """``(METHOD, path?query)`` of every request served, in order."""
        def collect() -> list[tuple[str, str]]:
            return [(str(r.method.value), str(r.url.path_qs)) for r in self.handler._requests]

        return self._on_loop(collect)

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run a coroutine on the emulator's loop (for kmock's own async API)."""
        async def wrap() -> T:
            return await awaitable

        return self._run(wrap())
