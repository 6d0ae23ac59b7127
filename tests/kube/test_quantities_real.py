"""Quantities as a real kube-apiserver stores them in a ResourceQuota and a LimitRange: the
in-memory fake's rewrite must match, and what the portal applied must compare equal to what
the server keeps (else the cluster reconciler would see drift, and write, on every resync)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.quantities import canonical_quantities, comparable
from tests.support.kube_server import ApiServer

pytestmark = pytest.mark.kube_server

# Quota items that take fractions (extended resources must be whole numbers).
KEYS = ("cpu", "memory", "requests.cpu", "limits.cpu", "requests.memory", "limits.memory",
        "ephemeral-storage", "requests.ephemeral-storage", "limits.ephemeral-storage")
WRITTEN = [
    "524288Mi", "65536Mi", "1000m", "8000m", "100m", "1.5", "0.5", "2000", "1000000", "0",
    "0.5Gi", "1.5Gi", "1.5Mi", "1024Ki", "1025Mi", "0.5Ki", "2.5Gi", "7Ti", "1e3", "10e2",
    "5e2", "3e-3", "0.001", "123456789m",
    # finer than a milli-unit: core resource lists are rounded up to 1m
    "0.1m", "1500u", "5n", "1.0001",
]


@pytest.fixture(scope="module")
def namespace(host_api: ApiServer) -> Iterator[tuple[KubernetesAdapter, str]]:
    admin = host_api.adapter()
    name = f"quantities-{secrets.token_hex(3)}"
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield admin, name
    admin.delete("v1", "Namespace", name)
    admin.close()


def quotas(namespace: str) -> list[dict[str, Any]]:
    chunks = [WRITTEN[i:i + len(KEYS)] for i in range(0, len(WRITTEN), len(KEYS))]
    return [{"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": f"quantities-{n}", "namespace": namespace},
             "spec": {"hard": dict(zip(KEYS, chunk, strict=False))}}
            for n, chunk in enumerate(chunks)]


def limit_ranges(namespace: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "LimitRange",
             "metadata": {"name": f"quantities-{n}", "namespace": namespace},
             "spec": {"limits": [{"type": "Container",
                                  "default": {"cpu": written, "memory": written}}]}}
            for n, written in enumerate(WRITTEN)]


def test_the_fake_stores_quota_quantities_as_the_server_does(
    namespace: tuple[KubernetesAdapter, str]
) -> None:
    admin, name = namespace
    for applied in quotas(name):
        stored = admin.apply(applied)
        assert canonical_quantities(applied)["spec"] == stored["spec"]
        assert comparable(applied)["spec"] == comparable(stored)["spec"]


def test_the_fake_stores_limit_range_quantities_as_the_server_does(
    namespace: tuple[KubernetesAdapter, str]
) -> None:
    admin, name = namespace
    for applied in limit_ranges(name):
        stored = admin.apply(applied)
        # (the server also fills defaultRequest from default; the portal always sets both)
        assert canonical_quantities(applied)["spec"]["limits"][0]["default"] == (
            stored["spec"]["limits"][0]["default"])
        assert comparable(applied)["spec"]["limits"][0]["default"] == (
            comparable(stored)["spec"]["limits"][0]["default"])
