"""Migrations go up and down on PostgreSQL and SQLite, and match the models."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, MetaData, Table, inspect, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.schema import CallableColumnDefault, ScalarElementColumnDefault

import app.process.all_models  # noqa: F401
from app.clusters.models import VirtualCluster
from app.database import migrate
from app.database.core import Base, make_engine
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.quotas.models import GpusInUse, QuotaRequest, TenantQuota
from app.tenants.models import Tenant
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


def test_0007_puts_every_existing_cluster_on_the_builtin_default_template(
        empty_url: str) -> None:
    """Clusters made before templates reference the "default" template's offered version 1,
    whose settings are all open: the shape they were made with."""
    migrate.upgrade(empty_url, "0006")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        for statement in (
            "INSERT INTO tenants (slug, display_name, state, created_at, updated_at) "
            "VALUES ('acme', 'Acme', 'active', '2026-11-01', '2026-11-01')",
            "INSERT INTO host_clusters (name, region, api_endpoint, is_default, created_at) "
            "VALUES ('default', '', '', true, '2026-11-01')",
            "INSERT INTO virtual_clusters (tenant_id, host_cluster_id, name, "
            "kubernetes_version, placement, gpus, cpu_millicores, memory_mib, generation, "
            "observed_generation, conditions, endpoint, over_quota, created_at, updated_at, "
            "next_reconcile_at, failed_attempts) VALUES (1, 1, 'train', '1.32.4', "
            "'shared-pool', 0, 0, 0, 1, 1, '[]', '', false, '2026-11-01', '2026-11-01', "
            "'2026-11-01', 0)",
        ):
            connection.execute(text(statement))
    migrate.upgrade(empty_url)
    with engine.connect() as connection:
        cluster = connection.execute(text(
            "SELECT template_version_id, pod_security, user_namespaces FROM virtual_clusters"
        )).one()
        version = connection.execute(text(
            "SELECT v.id, t.name, v.version, v.state, v.placement, v.kubernetes_version, "
            "v.gpu_class_id, v.max_gpus, v.pod_security, v.user_namespaces "
            "FROM cluster_template_versions v JOIN cluster_templates t "
            "ON t.id = v.template_id")).one()
    engine.dispose()
    assert tuple(cluster) == (version.id, None, False)
    assert tuple(version)[1:] == ("default", 1, "offered", None, None, None, None, None, False)
    migrate.downgrade(empty_url, "0006")
    assert "cluster_templates" not in _tables(empty_url)


def test_0011_leaves_existing_versions_validated_and_not_pending(empty_url: str) -> None:
    """Versions validated before validation moved to the worker keep their result, and none is
    left waiting for a worker. (The 0007 test takes a cluster on a version down through 0011.)"""
    migrate.upgrade(empty_url, "0008")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        connection.execute(text(
            "UPDATE cluster_template_versions SET validation = '{\"passed\": true, "
            "\"checks\": []}'"))
    migrate.upgrade(empty_url, "0011")
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT validation_requested_at, validation_lease_until, validation "
            "FROM cluster_template_versions")).all()
    assert rows and all(r[0] is None and r[1] is None and "passed" in str(r[2]) for r in rows)
    migrate.downgrade(empty_url, "0008")
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns(
            "cluster_template_versions")}
    engine.dispose()
    assert "validation_requested_at" not in columns and "validation" in columns


def _host_rows(url: str) -> list[tuple[object, ...]]:
    engine = make_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT name, region, credential_kind, credentials_encrypted, is_default, state, "
            "kube_qps, kube_burst, description FROM host_clusters ORDER BY id")).all()
    engine.dispose()
    return [tuple(row) for row in rows]


def test_0009_makes_the_existing_default_host_the_environments_registered_host(
        empty_url: str) -> None:
    """An install upgraded with its PORTAL_KUBECONFIG host keeps reaching it: same row (nodes
    and clusters still point at it), now kind ``env``, active, default QPS."""
    migrate.upgrade(empty_url, "0008")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO host_clusters (name, region, api_endpoint, is_default, created_at) "
            "VALUES ('default', 'eu-1', '', true, '2026-11-01')"))
        connection.execute(text(
            "INSERT INTO nodes (host_cluster_id, name, gpu_count, mig_strategy, mig_resources, "
            "zone, rack, clique, ready, taints, labels, first_seen_at, last_seen_at) VALUES "
            "(1, 'gpu-1', 8, 'none', '{}', '', '', '', true, '[]', '{}', '2026-11-01', "
            "'2026-11-01')"))
    migrate.upgrade(empty_url)
    assert _host_rows(empty_url) == [
        ("default", "eu-1", "env", None, True, "active", None, None, "")]
    with engine.connect() as connection:
        assert connection.execute(text(
            "SELECT h.name FROM nodes n JOIN host_clusters h ON h.id = n.host_cluster_id"
        )).scalar_one() == "default"
    engine.dispose()
    migrate.downgrade(empty_url, "0008")
    migrate.upgrade(empty_url)
    assert [row[:3] for row in _host_rows(empty_url)] == [("default", "eu-1", "env")]


def test_0009_registers_the_environments_host_on_an_install_in_use_without_one(
        empty_url: str) -> None:
    migrate.upgrade(empty_url, "0008")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO tenants (slug, display_name, state, created_at, updated_at) "
            "VALUES ('acme', 'Acme', 'active', '2026-11-01', '2026-11-01')"))
    engine.dispose()
    migrate.upgrade(empty_url)
    assert _host_rows(empty_url) == [
        ("default", "", "env", None, True, "active", None, None, "")]


def test_0009_leaves_an_empty_database_empty(empty_url: str) -> None:
    """A fresh install's host row comes at first use, as before (the tests' databases too)."""
    migrate.upgrade(empty_url)
    assert _host_rows(empty_url) == []


def test_0010_puts_existing_quota_in_the_default_hosts_region(empty_url: str) -> None:
    """Quota rows and requests made before regions are for the region of the host every
    cluster ran on; clusters keep why they are there. Down again, a class's quota rows of
    several regions become one, summed."""
    migrate.upgrade(empty_url, "0008")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        for statement in (
            "INSERT INTO host_clusters (name, region, api_endpoint, is_default, created_at) "
            "VALUES ('default', 'eu-1', '', true, '2026-11-01')",
            "INSERT INTO tenants (slug, display_name, state, created_at, updated_at) "
            "VALUES ('acme', 'Acme', 'active', '2026-11-01', '2026-11-01')",
            "INSERT INTO gpu_classes (product, display_name, memory_mib, declared_by_admin, "
            "created_at) VALUES ('H100', 'H100', 0, false, '2026-11-01')",
            "INSERT INTO tenant_quotas (tenant_id, gpu_class_id, gpus, cpu_millicores, "
            "memory_mib, updated_at) VALUES (1, 1, 8, 0, 0, '2026-11-01')",
            "INSERT INTO quota_requests (tenant_id, gpu_class_id, gpus, cpu_millicores, "
            "memory_mib, reason, state, created_at, overcommitted, decision_note) VALUES "
            "(1, 1, 8, 0, 0, 'x', 'approved', '2026-11-01', false, '')",
            "INSERT INTO virtual_clusters (tenant_id, host_cluster_id, name, "
            "kubernetes_version, placement, gpus, cpu_millicores, memory_mib, generation, "
            "observed_generation, conditions, endpoint, over_quota, created_at, updated_at, "
            "next_reconcile_at, failed_attempts, user_namespaces, addons) VALUES (1, 1, "
            "'train', '1.32.4', 'shared-pool', 0, 0, 0, 1, 1, '[]', '', false, '2026-11-01', "
            "'2026-11-01', '2026-11-01', 0, false, '[]')",
        ):
            connection.execute(text(statement))
    migrate.upgrade(empty_url)
    with engine.begin() as connection:
        assert connection.execute(text("SELECT region FROM tenant_quotas")).scalar_one() == (
            "eu-1")
        assert connection.execute(text("SELECT region FROM quota_requests")).scalar_one() == (
            "eu-1")
        reason = connection.execute(text("SELECT placement_reason FROM virtual_clusters"))
        assert "default host" in reason.scalar_one()
        connection.execute(text(
            "INSERT INTO tenant_quotas (tenant_id, gpu_class_id, region, gpus, amount, "
            "cpu_millicores, memory_mib, updated_at) VALUES (1, 1, 'us-1', 4, 4, 0, 0, "
            "'2026-11-01')"))
    migrate.downgrade(empty_url, "0009")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT gpus FROM tenant_quotas")).scalars().all() == [12]
    engine.dispose()
    migrate.upgrade(empty_url)


def test_0012_gives_hosts_no_webhook_url_and_goes_down_again(empty_url: str) -> None:
    """Hosts registered before 0012 have no webhook address: the environment's host keeps
    PORTAL_WEBHOOK_URL or the Service; a downgrade drops the column and keeps the hosts."""
    migrate.upgrade(empty_url, "0011")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO host_clusters (name, region, description, api_endpoint, "
            "credential_kind, is_default, state, health_checks, created_at, updated_at) "
            "VALUES ('gpu-us-1', 'us', '', 'https://us.example:6443', 'kubeconfig', false, "
            "'active', '[]', '2026-11-01', '2026-11-01')"))
    migrate.upgrade(empty_url, "0012")
    with engine.connect() as connection:
        assert connection.execute(text(
            "SELECT name, webhook_url FROM host_clusters")).all() == [("gpu-us-1", None)]
    migrate.downgrade(empty_url, "0011")
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("host_clusters")}
        assert connection.execute(text("SELECT name FROM host_clusters")).all() == [
            ("gpu-us-1",)]
    engine.dispose()
    assert "webhook_url" not in columns


def test_0016_counts_no_burst_in_what_was_sampled_before_and_goes_down_again(
        empty_url: str) -> None:
    """Samples and hours taken before 0016 had no burst to count (a leaf queue's limit was its
    quota): 0; a downgrade drops the burst columns and keeps the rows."""
    migrate.upgrade(empty_url, "0015")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        for statement in (
            "INSERT INTO tenants (slug, display_name, state, created_at, updated_at) "
            "VALUES ('acme', 'Acme', 'active', '2026-11-01', '2026-11-01')",
            "INSERT INTO usage_samples (taken_s, source, tenant_id, subject_id, used_gpus, "
            "allocated_gpus, requested_gpus, holds_s) VALUES (0, 'queue', 1, 1, 3, 3, 3, 600)",
            "INSERT INTO usage_hourly (hour_s, source, tenant_id, subject_id, samples, "
            "mean_used_gpus, peak_used_gpus, mean_allocated_gpus, mean_requested_gpus, "
            "used_gpu_seconds) VALUES (0, 'queue', 1, 1, 1, 3, 3, 3, 3, 10800)",
        ):
            connection.execute(text(statement))
    migrate.upgrade(empty_url, "0016")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT burst_gpus FROM usage_samples")).scalar_one() == 0
        assert connection.execute(text(
            "SELECT burst_gpu_seconds FROM usage_hourly")).scalar_one() == 0
    migrate.downgrade(empty_url, "0015")
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("usage_samples")}
        assert connection.execute(text("SELECT used_gpus FROM usage_samples")).scalar_one() == 3
        assert "cluster_gpus_in_use" not in inspect(connection).get_table_names()
    engine.dispose()
    assert "burst_gpus" not in columns


def _insert_as_of(connection: Connection, model: type[Base], **values: object) -> None:
    """A row of ``model`` as the table is at this revision: a column the model gained since is
    left out, and the model's defaults fill the columns that exist."""
    table = Table(model.__tablename__, MetaData(), autoload_with=connection)
    defaults = {column.name: _default_of(column.default) for column in model.__table__.columns
                if column.default is not None and column.name in table.c}
    connection.execute(table.insert().values({**defaults, **values}))


def _default_of(default: object) -> object:
    if isinstance(default, ScalarElementColumnDefault):
        return default.arg
    assert isinstance(default, CallableColumnDefault), default
    return default.arg(None)  # type: ignore[arg-type]  # the app's defaults read no context


def _two_clusters_one_asleep(connection: Connection) -> None:
    """acme's shared-pool ``train`` (4 GPUs) asleep since 10:00:00.5, and ``serve`` awake."""
    _insert_as_of(connection, Tenant, slug="acme", display_name="Acme")
    _insert_as_of(connection, HostCluster, name="default")
    _insert_as_of(connection, GpuClass, product="H100", display_name="H100")
    asleep = datetime(2026, 12, 2, 10, 0, 0, 500000, tzinfo=UTC)
    for name, since in (("train", asleep), ("serve", None)):
        _insert_as_of(connection, VirtualCluster,
            tenant_id=1, host_cluster_id=1, name=name, kubernetes_version="1.32.4",
            placement="shared-pool", gpu_class_id=1, gpus=4, asleep_since=since)


def test_0020_records_the_clusters_asleep_now_keeps_the_ledger_append_only_and_goes_down(
        empty_url: str) -> None:
    migrate.upgrade(empty_url, "0018")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        _two_clusters_one_asleep(connection)
    migrate.upgrade(empty_url, "0020")
    with engine.connect() as connection:
        assert connection.execute(text(
            "SELECT kind, subject_id, cluster_id, cluster_name, gpus, at_s FROM usage_ledger"
        )).all() == [("sleep", 1, 1, "train", 4,
                      int(datetime(2026, 12, 2, 10, tzinfo=UTC).timestamp()))]
    for statement in ("UPDATE usage_ledger SET gpus = 0", "DELETE FROM usage_ledger",
                      "INSERT INTO usage_ledger (at, at_s, kind, subject_id, tenant_id, "
                      "gpu_class_id, cluster_name, gpus) VALUES ('2026-12-02', 0, 'nap', 1, 1, "
                      "1, '', 1)"):
        with pytest.raises(DBAPIError), engine.begin() as connection:
            connection.execute(text(statement))
    migrate.downgrade(empty_url, "0018")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM usage_ledger")).scalar_one() == 0
    with pytest.raises(DBAPIError), engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO usage_ledger (at, at_s, kind, subject_id, tenant_id, gpu_class_id, "
            "cluster_name, gpus) VALUES ('2026-12-02', 0, 'sleep', 1, 1, 1, '', 1)"))
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO usage_ledger (at, at_s, kind, subject_id, tenant_id, gpu_class_id, "
            "cluster_name, gpus) VALUES ('2026-12-02', 0, 'cluster', 1, 1, 1, '', 1)"))
    with pytest.raises(DBAPIError), engine.begin() as connection:
        connection.execute(text("DELETE FROM usage_ledger"))
    engine.dispose()


def _count(connection: Connection, query: str) -> object:
    return connection.execute(text(query)).scalar_one()


def test_0034_counts_what_was_granted_in_whole_gpus_and_goes_down_without_the_parts(
        empty_url: str) -> None:
    """Every grant made before 0034 is whole GPUs (amount = gpus, the ledger's too); the checks
    refuse a row whose unit, profile and figures disagree; a tenant holds whole GPUs and slices
    of a class in one region side by side. Down again, slices and shares go, whole GPUs stay."""
    migrate.upgrade(empty_url, "0033")
    engine = make_engine(empty_url)
    with engine.begin() as connection:
        _two_clusters_one_asleep(connection)
        _insert_as_of(connection, TenantQuota, tenant_id=1, gpu_class_id=1, gpus=8)
        _insert_as_of(connection, QuotaRequest, tenant_id=1, gpu_class_id=1, gpus=8,
                      state="approved", approved_gpus=8)
        _insert_as_of(connection, GpusInUse, tenant_id=1, gpu_class_id=1, host_cluster_id=1,
                      gpus=2.0, observed_at=datetime(2026, 12, 7, tzinfo=UTC))
        connection.execute(text(
            "INSERT INTO usage_ledger (at, at_s, kind, subject_id, tenant_id, gpu_class_id, "
            "cluster_name, gpus) VALUES ('2026-12-02', 0, 'quota', 1, 1, 1, '', 8)"))
    migrate.upgrade(empty_url, "0034")
    with engine.begin() as connection:
        for table in ("tenant_quotas", "quota_requests", "virtual_clusters", "usage_ledger"):
            assert connection.execute(text(
                f"SELECT DISTINCT unit, mig_profile, amount - gpus FROM {table}"  # noqa: S608
            )).all() == [
                ("gpu", "", 0)], table
        assert _count(connection, "SELECT approved_amount FROM quota_requests") == 8
        assert _count(connection, "SELECT unit FROM quota_gpus_in_use") == "gpu"
        _insert_as_of(connection, TenantQuota, tenant_id=1, gpu_class_id=1, gpus=0,
                      unit="mig", mig_profile="1g.10gb", amount=3)
        _insert_as_of(connection, GpusInUse, tenant_id=1, gpu_class_id=1, host_cluster_id=1,
                      unit="mig", mig_profile="1g.10gb", gpus=3.0,
                      observed_at=datetime(2026, 12, 7, tzinfo=UTC))
    for refused in (
        "UPDATE tenant_quotas SET amount = 7 WHERE unit = 'gpu'",  # whole GPUs: amount = gpus
        "UPDATE tenant_quotas SET mig_profile = '' WHERE unit = 'mig'",
        "UPDATE tenant_quotas SET gpus = 3 WHERE unit = 'mig'",  # gpus are whole GPUs only
        "UPDATE virtual_clusters SET unit = 'share', gpus = 0, amount = 50, "
        "placement = 'dedicated-nodes'",
        "UPDATE quota_requests SET unit = 'share', gpus = 0, amount = 150",
        "UPDATE quota_requests SET unit = 'cpu'",
        "UPDATE gpu_classes SET share_step = 30",
    ):
        with pytest.raises(DBAPIError), engine.begin() as connection:
            connection.execute(text(refused))
    with engine.begin() as connection:
        connection.execute(text("UPDATE gpu_classes SET share_step = 25"))
        connection.execute(text("UPDATE virtual_clusters SET unit = 'share', gpus = 0, "
                                "amount = 50 WHERE name = 'serve'"))
    migrate.downgrade(empty_url, "0033")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT gpus FROM tenant_quotas")).all() == [(8,)]
        assert connection.execute(text("SELECT gpus FROM quota_gpus_in_use")).all() == [(2.0,)]
        assert connection.execute(text(
            "SELECT name, gpus FROM virtual_clusters ORDER BY name")).all() == [
            ("serve", 0), ("train", 4)]
        columns = {c["name"] for c in inspect(connection).get_columns("tenant_quotas")}
        assert _count(connection, "SELECT count(*) FROM usage_ledger") == 1
    engine.dispose()
    assert not {"unit", "mig_profile", "amount"} & columns
    migrate.upgrade(empty_url)
