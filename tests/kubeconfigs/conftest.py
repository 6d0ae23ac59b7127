"""Fixtures for kubeconfig tests: acme's tenancy and a Ready cluster ``train`` whose virtual API
is the run's real kube-apiserver (``virtual_api``), reached through the app's real connector and
the official client. The app under test records what it sends there (``kube_calls``).

``virtual_api`` is shared by the whole run: look things up by the test's own user ids and
names (``tests.support.kubeconfigs``), never by counting a namespace.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kit.config import Settings
from app.kube.connector import ClientConnector
from app.process.asgi import create_app
from tests.support.kube import RecordingConnector
from tests.support.kube_server import ApiServer
from tests.support.kubeconfigs import real_ready_cluster
from tests.support.tenancy import Tenancy, build_tenancy
from tests.support.virtual_clusters import ready_cluster


@pytest.fixture
def tenancy(db: Session) -> Tenancy:
    return build_tenancy(db, nodes=1)


@pytest.fixture
def train(db: Session, tenancy: Tenancy, virtual_api: ApiServer) -> VirtualCluster:
    """acme's Ready cluster ``train``: its endpoint and admin credential are the real API
    server's (the credential as vCluster exports it: CN kubernetes-admin, O system:masters)."""
    cluster = real_ready_cluster(db, tenancy.acme, virtual_api)
    db.commit()
    return cluster


@pytest.fixture
def offline_train(db: Session, tenancy: Tenancy) -> VirtualCluster:
    """acme's Ready cluster ``train`` whose credential reaches no server: for tests whose
    connector is the in-memory fake."""
    cluster = ready_cluster(db, tenancy.acme)
    db.commit()
    return cluster


@pytest.fixture
def kube_calls(settings: Settings) -> RecordingConnector:
    """The app's real connector; ``.calls`` lists what the app sent to virtual clusters."""
    return RecordingConnector(ClientConnector(settings))


@pytest.fixture
def client(settings: Settings, database: Database,
           kube_calls: RecordingConnector) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database, kube_calls)) as test_client:
        yield test_client
