"""Fixtures of the route walks: the world of callers and an app whose clusters are fakes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.database.core import Database
from app.kit.config import Settings
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort
from app.process.asgi import create_app


@pytest.fixture
def matrix_client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database, kube=InMemoryClusters())) as client:
        yield client


class InMemoryClusters:
    """Virtual clusters answer from an in-memory fake: the matrix checks who may, not how."""

    def host(self) -> KubePort | None:
        return None

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return InMemoryKube()

    def ready(self, kubeconfig_yaml: str) -> bool:
        return True
