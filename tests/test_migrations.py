"""Migrations go up and down on PostgreSQL and SQLite, and match the models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

import app.models  # noqa: F401
from app import migrate
from app.db import Base, make_engine
from tests.support import postgres


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrate.db'}"
        return
    name = postgres.unique_name("gtp_mig")
    postgres.create_database(name)
    yield postgres.sqlalchemy_url(name)
    postgres.drop_database(name)


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_creates_every_table_and_matches_the_models(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    assert _tables(empty_url) == set(Base.metadata.tables)
    engine = make_engine(empty_url)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert differences == []


def test_downgrade_to_base_removes_everything_and_upgrade_works_again(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    migrate.downgrade(empty_url, "base")
    assert _tables(empty_url) == set()
    migrate.upgrade(empty_url)
    assert "tenants" in _tables(empty_url)
