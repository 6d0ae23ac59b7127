"""Fixtures for the Kubernetes port: the HTTP emulator, the real adapter on it, the fake."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.memory import InMemoryKube
from app.kube.retry import RetryPolicy
from tests.kube.emulator import KubeEmulator
from tests.support.paths import HOST_NODES


@pytest.fixture
def kube_emulator() -> Iterator[KubeEmulator]:
    """A fresh stateful API server on loopback (Namespaces default/kube-system/kube-public).

    ``.url``; ``.seed(obj)``/``.seed_file(path)`` to preload; ``.stored(...)`` to look at an
    object without the API; ``.fail(path_regex, status, ...)`` for HTTP faults;
    ``.tokens`` and ``.requests()`` to see what was served.
    """
    emulator = KubeEmulator().start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def host_nodes(kube_emulator: KubeEmulator) -> list[dict[str, object]]:
    """The reference host NodeList preloaded into the emulator."""
    return kube_emulator.seed_file(HOST_NODES)


@pytest.fixture
def kube_adapter(kube_emulator: KubeEmulator) -> Iterator[KubernetesAdapter]:
    """The real adapter talking HTTP to the emulator; retries back off without sleeping."""
    adapter = KubernetesAdapter.from_host(
        kube_emulator.url, qps=1000.0, burst=1000,
        retry=RetryPolicy(attempts=4, base_delay=0.0, max_delay=5.0),
        sleep=lambda _seconds: None,
    )
    try:
        yield adapter
    finally:
        adapter.close()


@pytest.fixture
def memory_kube() -> InMemoryKube:
    return InMemoryKube()
