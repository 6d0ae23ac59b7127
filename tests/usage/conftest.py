"""Fixtures of the usage tests on a real GPU host (``test_kai_real``, ``test_in_use_real``):
each module starts its own ``gpu_host``; ``host`` is an admin client of it for one test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.kube.adapter import KubernetesAdapter
from tests.support.kai import GpuScheduling


@pytest.fixture
def host(gpu_host: GpuScheduling) -> Iterator[KubernetesAdapter]:
    adapter = gpu_host.server.adapter()
    yield adapter
    adapter.close()
