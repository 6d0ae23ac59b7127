"""Fixtures for kubeconfig tests: acme's tenancy and a Ready cluster whose virtual API is the
Kubernetes emulator (reached through the app's real connector and the official client)."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from tests.kube.conftest import kube_emulator  # noqa: F401 - fixture re-export
from tests.kube.emulator import KubeEmulator
from tests.support.tenancy import Tenancy, build_tenancy
from tests.support.virtual_clusters import ready_cluster


@pytest.fixture
def tenancy(db: Session) -> Tenancy:
    return build_tenancy(db, nodes=1)


@pytest.fixture
def train(
    db: Session, tenancy: Tenancy, kube_emulator: KubeEmulator  # noqa: F811 - the fixture
) -> VirtualCluster:
    """acme's Ready cluster ``train``; its admin kubeconfig names the emulator."""
    cluster = ready_cluster(db, tenancy.acme, server=kube_emulator.url)
    db.commit()
    return cluster
