"""An informer-style read cache: each kind LISTed once, by label selector and across all
namespaces, instead of one GET per object.

A reconciler that checks many unchanged objects reads them here. The snapshot is taken again
once it is older than ``max_age_seconds``, so drift made on the server is still seen, at most
that much later; what the reader writes itself goes through ``stored``/``forgot`` so it never
trips over its own writes. Objects outside the cached kinds, or without the selector's labels,
are not here: for those ``get`` answers ``None`` as for a missing object, and the reader
applies them (which puts the labels back).

Objects are kept without ``metadata.managedFields`` (often half an object's size): the cache
serves comparisons with what the reader wants, not field ownership.

Thread-safe: one reader refreshes while the others wait for the new snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from app.kube.port import KubePort, Manifest, ObjectRef


class ListCache:
    def __init__(
        self,
        port: KubePort,
        kinds: Iterable[tuple[str, str]],
        label_selector: Mapping[str, str],
        *,
        max_age_seconds: float,
        clock: Callable[[], float],
    ) -> None:
        self.port = port
        self.kinds = frozenset(kinds)
        self.label_selector = dict(label_selector)
        self.max_age = max_age_seconds
        self.clock = clock
        self.refreshes = 0
        self._objects: dict[ObjectRef, Manifest] = {}
        self._taken_at: float | None = None
        self._lock = threading.Lock()

    def covers(self, ref: ObjectRef) -> bool:
        return (ref.api_version, ref.kind) in self.kinds

    def get(self, ref: ObjectRef) -> Manifest | None:
        """The object as of a snapshot no older than ``max_age_seconds`` (shared: read only)."""
        if not self.covers(ref):
            raise ValueError(f"{ref.kind} is not cached")
        with self._lock:
            if self._stale():
                self._refresh()
            return self._objects.get(ref)

    def stored(self, obj: Manifest) -> None:
        """The reader wrote ``obj`` (as the server returned it)."""
        ref = ObjectRef.of(obj)
        if self.covers(ref):
            with self._lock:
                self._objects[ref] = _slim(obj)

    def forgot(self, ref: ObjectRef) -> None:
        """The reader deleted ``ref``."""
        with self._lock:
            self._objects.pop(ref, None)

    def invalidate(self) -> None:
        with self._lock:
            self._taken_at = None

    def _stale(self) -> bool:
        return self._taken_at is None or self.clock() - self._taken_at >= self.max_age

    def _refresh(self) -> None:
        taken_at = self.clock()
        objects: dict[ObjectRef, Manifest] = {}
        for api_version, kind in sorted(self.kinds):
            for obj in self.port.list(api_version, kind, label_selector=self.label_selector):
                objects[ObjectRef.of(obj)] = _slim(obj)
        self._objects, self._taken_at = objects, taken_at
        self.refreshes += 1


def _slim(obj: Manifest) -> Manifest:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        obj = {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    return obj
