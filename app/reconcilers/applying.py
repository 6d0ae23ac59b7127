"""Objects a kind owns outright on a host: each read, and applied only where it differs."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from app.kube.port import KubePort, Manifest, ObjectRef
from app.kube.quantities import drifted


def apply_drifted(host: KubePort, objects: Iterable[Manifest],
                  check: Callable[[], None]) -> int:
    """Applies each object that is missing or differs (``check``, the lease, before each
    write); how many it wrote."""
    written = 0
    for obj in objects:
        ref = ObjectRef.of(obj)
        live = host.get(ref.api_version, ref.kind, ref.name, ref.namespace)
        if drifted(live, obj):
            check()
            # The portal owns these objects outright: take back fields others set.
            host.apply(obj, force=True)
            written += 1
    return written
