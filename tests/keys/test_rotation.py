"""Rotating PORTAL_ENCRYPTION_KEY: stored credentials move to the new key, none is lost."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select
from typer.testing import CliRunner

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.hosts.models import HostCluster
from app.keys.service import rotate_stored_secrets
from app.kit.config import get_settings
from app.kit.crypto import SecretBox, UnreadableSecret
from app.notifications.models import WebhookEndpoint
from app.process.cli import cli
from tests import factories

KUBECONFIG = "apiVersion: v1\nkind: Config\n"


@dataclass
class Keys:
    old: str
    new: str

    def rotating(self) -> SecretBox:
        return SecretBox(self.new, [self.old])


@pytest.fixture
def keys() -> Keys:
    return Keys(old=Fernet.generate_key().decode(), new=Fernet.generate_key().decode())


def _store_under(database: Database, key: str, clusters: int = 2) -> None:
    box = SecretBox(key)
    with database.transaction() as db:
        tenant, host = factories.tenant(db), factories.host_cluster(db)
        host.credentials_encrypted = box.seal("host credentials")
        for number in range(clusters):
            factories.cluster(db, tenant, host, name=f"train-{number}",
                              admin_kubeconfig_encrypted=box.seal(KUBECONFIG))
        factories.cluster(db, tenant, host, name="pending")  # no credential yet


def _sealed(database: Database) -> list[str]:
    with database.session() as db:
        clusters = db.scalars(select(VirtualCluster.admin_kubeconfig_encrypted)
                              .where(VirtualCluster.admin_kubeconfig_encrypted.is_not(None)))
        hosts = db.scalars(select(HostCluster.credentials_encrypted)
                           .where(HostCluster.credentials_encrypted.is_not(None)))
        return [value for value in [*clusters, *hosts] if value is not None]


def test_credentials_sealed_with_the_old_key_open_while_it_is_listed(
    database: Database, keys: Keys
) -> None:
    _store_under(database, keys.old)
    for sealed in _sealed(database):
        assert keys.rotating().open(sealed) in (KUBECONFIG, "host credentials")
        with pytest.raises(UnreadableSecret):
            SecretBox(keys.new).open(sealed)


def test_rotate_reencrypts_every_credential_so_the_new_key_alone_opens_it(
    database: Database, keys: Keys
) -> None:
    _store_under(database, keys.old, clusters=3)
    report = rotate_stored_secrets(database, keys.rotating(), batch_size=2)
    assert (report.reencrypted, report.already_current, report.unreadable) == (4, 0, [])
    opened = sorted(SecretBox(keys.new).open(sealed) for sealed in _sealed(database))
    assert opened == [KUBECONFIG, KUBECONFIG, KUBECONFIG, "host credentials"]


def test_rotate_is_audited_per_credential_without_the_secret(
    database: Database, keys: Keys
) -> None:
    _store_under(database, keys.old)
    rotate_stored_secrets(database, keys.rotating(), actor_label="cli")
    with database.session() as db:
        events = db.scalars(select(AuditEvent)
                            .where(AuditEvent.action.like("%.credential_reencrypted"))).all()
    assert sorted(e.action for e in events) == [
        "host_cluster.credential_reencrypted", "virtual_cluster.credential_reencrypted",
        "virtual_cluster.credential_reencrypted"]
    assert all(e.actor_label == "cli" for e in events)
    assert all(e.tenant_id is not None for e in events if e.target_type == "virtual_cluster")
    assert not any("apiVersion" in str(e.after) for e in events)


def test_running_rotate_twice_changes_nothing_the_second_time(
    database: Database, keys: Keys
) -> None:
    _store_under(database, keys.old)
    rotate_stored_secrets(database, keys.rotating())
    after_first = _sealed(database)
    report = rotate_stored_secrets(database, keys.rotating())
    assert (report.reencrypted, report.already_current) == (0, 3)
    assert _sealed(database) == after_first


def test_a_credential_no_key_opens_is_reported_and_left_as_it_is(
    database: Database, keys: Keys
) -> None:
    _store_under(database, keys.old)
    before = _sealed(database)
    report = rotate_stored_secrets(database, SecretBox(keys.new))
    assert report.reencrypted == 0 and not report.complete
    assert len(report.unreadable) == 3
    assert report.unreadable[0].startswith("virtual_cluster ")
    assert _sealed(database) == before


def test_webhook_signing_secrets_and_a_rolled_ones_predecessor_move_to_the_new_key(
    database: Database, keys: Keys
) -> None:
    old_box = SecretBox(keys.old)
    with database.transaction() as db:
        tenant = factories.tenant(db)
        rolled = WebhookEndpoint(tenant_id=tenant.id, name="rolled", url="https://a.example/",
                                 format="slack", secret_sealed=old_box.seal("whsec_current"),
                                 previous_secret_sealed=old_box.seal("whsec_previous"))
        platform = WebhookEndpoint(tenant_id=None, name="ops", url="https://b.example/",
                                   format="cloudevents", secret_sealed=old_box.seal("whsec_ops"))
        db.add_all([rolled, platform])
    report = rotate_stored_secrets(database, keys.rotating())
    assert (report.reencrypted, report.unreadable) == (3, [])
    new_box = SecretBox(keys.new)
    with database.session() as db:
        rows = db.scalars(select(WebhookEndpoint).order_by(WebhookEndpoint.id)).all()
        assert [(new_box.open(row.secret_sealed), row.previous_secret_sealed and new_box.open(
            row.previous_secret_sealed)) for row in rows] == [
            ("whsec_current", "whsec_previous"), ("whsec_ops", None)]
        events = db.scalars(select(AuditEvent).where(
            AuditEvent.action == "webhook_endpoint.credential_reencrypted")).all()
    assert sorted(e.tenant_id is None for e in events) == [False, False, True]
    assert not any("whsec_" in str([e.before, e.after]) for e in events)


# ----- the command, as an operator runs it


@pytest.fixture
def cli_env(sqlite_database: Database, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    monkeypatch.setenv("PORTAL_DATABASE_URL", f"sqlite:///{tmp_path / 'portal.db'}")
    get_settings.cache_clear()
    yield sqlite_database
    get_settings.cache_clear()


def _portal_keys_rotate(monkeypatch: pytest.MonkeyPatch, key: str,
                        old_keys: str = "") -> tuple[int, str, str]:
    monkeypatch.setenv("PORTAL_ENCRYPTION_KEY", key)
    monkeypatch.setenv("PORTAL_ENCRYPTION_OLD_KEYS", old_keys)
    get_settings.cache_clear()
    result = CliRunner().invoke(cli, ["keys", "rotate", "--batch-size", "1"])
    return result.exit_code, result.stdout, result.stderr


def test_portal_keys_rotate_reports_counts_and_is_idempotent(
    cli_env: Database, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store_under(cli_env, keys.old)
    code, out, err = _portal_keys_rotate(monkeypatch, keys.new, keys.old)
    assert code == 0, err
    assert "re-encrypted: 3, already current: 0" in out
    code, out, _ = _portal_keys_rotate(monkeypatch, keys.new)
    assert code == 0 and "re-encrypted: 0, already current: 3" in out
    assert all(SecretBox(keys.new).open(s) for s in _sealed(cli_env))


def test_portal_keys_rotate_without_the_old_key_says_which_key_is_missing(
    cli_env: Database, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store_under(cli_env, keys.old)
    code, out, err = _portal_keys_rotate(monkeypatch, keys.new)
    assert code == 1
    assert "unreadable: 3" in out
    assert "PORTAL_ENCRYPTION_OLD_KEYS" in err and "Traceback" not in err
    assert all(keys.rotating().open(s) for s in _sealed(cli_env))


def test_portal_keys_rotate_refuses_a_malformed_old_key(
    cli_env: Database, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = _portal_keys_rotate(monkeypatch, keys.new, "not-a-key")
    assert code == 2
    assert "PORTAL_ENCRYPTION_OLD_KEYS: key 1 is not a Fernet key" in err
