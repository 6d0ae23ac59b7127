"""Fixtures for nodes: the kube fixtures of tests/kube, a connector handing out one host port,
and a fleet of the reference nodes for service tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from app.config import Settings
from app.db import Database
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort
from app.nodes.reconciler import NodeReconciler
from tests.kube.conftest import (  # noqa: F401 - fixtures re-exported for these tests
    host_nodes,
    kube_adapter,
    kube_emulator,
    memory_kube,
)
from tests.support.paths import HOST_NODES

RACK_LABEL = "network.topology.example.com/rack"


class HostOnly:
    """A ``KubeConnector`` whose host cluster is the given port (or none)."""

    def __init__(self, host: KubePort | None) -> None:
        self._host = host

    def host(self) -> KubePort | None:
        return self._host

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        raise AssertionError("node tests reach no virtual cluster")

    def ready(self, kubeconfig_yaml: str) -> bool:
        return False


def reference_nodes() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(HOST_NODES.read_text())["items"]
    for item in items:
        item.setdefault("apiVersion", "v1")
        item.setdefault("kind", "Node")
    return items


@pytest.fixture
def host_kube() -> InMemoryKube:
    """The in-memory fake holding the reference NodeList."""
    kube = InMemoryKube()
    for node in reference_nodes():
        kube.seed(node)
    return kube


def reconciler(database: Database, host: KubePort | None, resync_seconds: float = 0.0,
               clock: Callable[[], float] = time.monotonic) -> NodeReconciler:
    settings = Settings(env="test", database_url="sqlite://", rack_label=RACK_LABEL,
                        worker_resync_seconds=resync_seconds)
    return NodeReconciler(settings, database, HostOnly(host), clock=clock)


@dataclass
class Synced:
    database: Database
    kube: InMemoryKube
    reconciler: NodeReconciler


@pytest.fixture
def synced(database: Database, host_kube: InMemoryKube) -> Synced:
    """The reference nodes synced into the inventory through the fake."""
    loop = reconciler(database, host_kube)
    loop.run_due("test")
    host_kube.reset_calls()
    return Synced(database, host_kube, loop)
