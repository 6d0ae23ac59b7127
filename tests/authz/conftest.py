"""Fixtures of the route walks: the world of callers, built once per worker, and an app whose
clusters are fakes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.auth.models import WebSession
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort
from app.process.asgi import create_app
from tests.authz.world import World, build_world
from tests.support import postgres


@pytest.fixture(scope="session")
def world_database(pg_template: str) -> Iterator[tuple[Database, World]]:
    """The world committed once per worker in a copy of the migrated database: building it for
    each of the walks' two thousand tests took most of their time."""
    with postgres.cloned_database(pg_template, "gtp_world") as database:
        with database.session() as db:
            world = build_world(db)
            db.commit()
        yield database, world


@pytest.fixture
def database(request: pytest.FixtureRequest,
             pg_engine_database: Database) -> Iterator[Database]:
    """A test of the world runs in one outer transaction on the world's database, rolled back
    after it, as any other test runs on the empty one."""
    engine = pg_engine_database.engine
    if "world" in request.fixturenames:
        engine = request.getfixturevalue("world_database")[0].engine
    with postgres.rolled_back(engine) as database:
        yield database


@pytest.fixture
def world(world_database: tuple[Database, World], db: Session) -> World:
    """The worker's world, its browser sessions seen just now (a session idle an hour ends)."""
    db.execute(update(WebSession).values(last_seen_at=utcnow()))
    db.commit()
    built = world_database[1]
    built.current = "anonymous"
    return built


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
