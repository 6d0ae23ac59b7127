"""Migration 0031: every cluster keeps idle meaning no GPU pod bound, a template version has no
default; the check refuses another measure; a downgrade drops the columns and keeps the rows."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import DBAPIError

from app.database import migrate
from app.database.core import make_engine
from tests.test_migrations import empty_url

__all__ = ["empty_url"]  # the fixture, PostgreSQL and SQLite

_CLUSTER = (
    "INSERT INTO virtual_clusters (tenant_id, host_cluster_id, name, kubernetes_version, "
    "placement, gpus, cpu_millicores, memory_mib, generation, observed_generation, conditions, "
    "endpoint, over_quota, created_at, updated_at, failed_attempts, addons, user_namespaces, "
    "placement_reason) VALUES (1, 1, '{name}', '1.32.4', 'shared-pool', 0, 0, 0, 1, 1, '[]', "
    "'', false, '2026-11-01', '2026-11-01', 0, '[]', false, '')")


def test_0031_keeps_every_cluster_on_bound_and_goes_down_again(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0030")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        for statement in (
            "INSERT INTO tenants (slug, display_name, state, created_at, updated_at) "
            "VALUES ('acme', 'Acme', 'active', '2026-11-01', '2026-11-01')",
            "INSERT INTO host_clusters (name, region, description, api_endpoint, "
            "credential_kind, is_default, state, health_checks, created_at, updated_at) "
            "VALUES ('default', '', '', '', 'kubeconfig', true, 'active', '[]', "
            "'2026-11-01', '2026-11-01')",
            _CLUSTER.format(name="train"),
        ):
            connection.execute(text(statement))
    migrate.upgrade(empty_url, "0031")
    with engine.connect() as connection:
        assert connection.execute(text(
            "SELECT name, idle_measure FROM virtual_clusters")).all() == [
            ("train", "bound")]
        assert connection.execute(text(
            "SELECT count(*) FROM cluster_template_versions "
            "WHERE idle_measure IS NOT NULL")).scalar_one() == 0
    with pytest.raises(DBAPIError), engine.begin() as connection:
        connection.execute(text("UPDATE virtual_clusters SET idle_measure = 'sometimes'"))
    migrate.downgrade(empty_url, "0030")
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("virtual_clusters")}
        templates = {c["name"] for c in inspect(connection).get_columns(
            "cluster_template_versions")}
        assert connection.execute(text("SELECT name FROM virtual_clusters")).all() == [
            ("train",)]
    engine.dispose()
    assert "idle_measure" not in columns | templates
