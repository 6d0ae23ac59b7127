"""Fixtures for template tests: acme with 32 approved H100s, 16 of them on two 8-GPU nodes
dedicated to it and 16 for its shared-pool clusters (dedicated GPUs are part of the quota), an
app whose host is the real test API server (with KAI's Queue CRD) and stand-in charts."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.kube.adapter import KubernetesAdapter
from app.nodes.models import Node
from tests import factories
from tests.support.kube import InMemoryConnector
from tests.support.kube_server import ApiServer
from tests.support.tenancy import Tenancy, build_tenancy
from tests.templates import registry as oci
from tests.templates.support import StandinCharts


@pytest.fixture
def tenancy(db: Session) -> Tenancy:
    tenancy = build_tenancy(db)
    factories.quota(db, tenancy.acme, tenancy.h100, 32)
    for node in db.scalars(select(Node).order_by(Node.id).limit(2)):
        factories.assignment(db, node, tenancy.acme)
    db.commit()
    return tenancy


@pytest.fixture
def charts() -> StandinCharts:
    return StandinCharts()


@pytest.fixture(scope="module")
def real_host(kai_host: ApiServer) -> Iterator[KubernetesAdapter]:
    adapter = kai_host.adapter()
    yield adapter
    adapter.close()


@pytest.fixture
def app_client(client: TestClient, charts: StandinCharts) -> TestClient:
    """The app without a host cluster (validation says so), with the stand-in charts."""
    client.app.state.chart_resolver = charts  # type: ignore[attr-defined]
    client.app.state.kube = InMemoryConnector(None)  # type: ignore[attr-defined]
    return client


@pytest.fixture
def host_client(app_client: TestClient, real_host: KubernetesAdapter) -> TestClient:
    """The app with the real test API server as its host cluster."""
    app_client.app.state.kube = InMemoryConnector(real_host)  # type: ignore[attr-defined]
    return app_client


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[oci.Registry]:
    """A real OCI registry (token auth) with KAI's chart at 0.9.3 (with a values schema) and a
    monitoring agent without one."""
    if not oci.available():
        if os.environ.get("CI") == "true":
            pytest.fail("docker-registry (Debian package) is missing: `make oci-registry`")
        pytest.skip("docker-registry (Debian package) is not installed: `make oci-registry`")
    served = oci.run_registry(tmp_path_factory.mktemp("registry"))
    started = next(served)
    started.push_chart(oci.KAI_PATH, oci.chart_archive(
        "kai-scheduler", "0.9.3", values={"scheduler": {"replicas": 1}},
        schema=oci.KAI_SCHEMA), "kai-scheduler", "0.9.3")
    started.push_chart("obs", oci.chart_archive("agent", "1.4.0+build.7"), "agent",
                       "1.4.0+build.7")
    yield started
    next(served, None)
