"""Host clusters through the service: registered sealed, cordoned out of placement, deleted only
when nothing points at them, every change audited without the secret."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.database.core import Database
from app.hosts import repository, service
from app.hosts.health import CheckResult
from app.hosts.models import HostCluster
from app.hosts.schemas import HostCredentialsIn, HostRegister, HostUpdate
from app.keys.service import rotate_stored_secrets
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kit.errors import Conflict, Forbidden
from app.lab.pki import CertificateAuthority
from tests import factories
from tests.support.kube_server import kubeconfig_yaml

SECRET = "s3cr3t-sa-token-for-gpu-eu-2"
CA = CertificateAuthority()


def admin(db: Session) -> Principal:
    return Principal(user=factories.user(db, admin=True), via="token")


def register(db: Session, settings: Settings, name: str = "gpu-eu-2",
             region: str = "eu-west") -> HostCluster:
    payload = HostRegister(name=name, region=region, description="second site",
                           credentials=HostCredentialsIn(
                               kind="kubeconfig", kubeconfig=kubeconfig_yaml(
                                   "https://gpu-eu-2.example.com:6443", CA.cert_pem,
                                   token=SECRET)))
    service.register_host(db, admin(db), settings, payload)
    row = repository.host_by_name(db, name)
    assert row is not None
    return row


def test_registering_seals_the_credentials_and_shows_only_kind_server_and_when(
        db: Session, settings: Settings) -> None:
    row = register(db, settings)
    shown = service.get_host(db, admin(db), "gpu-eu-2")
    assert (shown.credentials.kind, shown.credentials.server) == (
        "kubeconfig", "https://gpu-eu-2.example.com:6443")
    assert shown.credentials.set_at is not None
    assert SECRET not in shown.model_dump_json()
    assert row.credentials_encrypted and SECRET not in row.credentials_encrypted
    assert SECRET in SecretBox.from_settings(settings).open(row.credentials_encrypted)
    target = service.target_for(row, settings)
    assert target is not None and SECRET in (target.kubeconfig_yaml or "")
    events = db.scalars(select(AuditEvent).where(AuditEvent.target_type == "host_cluster"))
    audited = [(e.action, str(e.before), str(e.after)) for e in events]
    assert [a[0] for a in audited] == ["host_cluster.register"]
    assert all(SECRET not in text for a in audited for text in a)


def test_only_platform_admins_see_or_change_hosts(db: Session, settings: Settings) -> None:
    member = Principal(user=factories.user(db), via="token")
    with pytest.raises(Forbidden):
        service.list_hosts(db, member)
    read_only = Principal(user=factories.user(db, admin=True), via="token",
                          scopes=frozenset({"read"}))
    with pytest.raises(Forbidden):
        service.set_state(db, read_only, repository.ensure_default_host(db).name, "cordoned")


def test_a_cordoned_or_draining_host_takes_no_new_clusters(db: Session,
                                                            settings: Settings) -> None:
    default = repository.ensure_default_host(db)
    second = register(db, settings)
    assert service.host_for_new_cluster(db) is default
    service.set_state(db, admin(db), default.name, "cordoned")
    assert service.host_for_new_cluster(db) is second
    service.set_state(db, admin(db), second.name, "draining", "rack 4 is being replaced")
    with pytest.raises(Conflict, match="every host is cordoned or draining"):
        service.host_for_new_cluster(db)
    service.set_state(db, admin(db), default.name, "active")
    assert service.host_for_new_cluster(db) is default
    actions = list(db.scalars(select(AuditEvent.action).where(
        AuditEvent.target_type == "host_cluster").order_by(AuditEvent.id)))
    assert actions[-3:] == ["host_cluster.cordon", "host_cluster.drain",
                            "host_cluster.uncordon"]


def test_a_host_is_deleted_only_when_no_node_or_cluster_points_at_it(
        db: Session, settings: Settings) -> None:
    row = register(db, settings)
    node = factories.node(db, row, None, "gpu-node-1")
    with pytest.raises(Conflict, match="1 nodes"):
        service.delete_host(db, admin(db), row.name)
    db.delete(node)
    db.flush()
    service.delete_host(db, admin(db), row.name)
    assert repository.host_by_name(db, "gpu-eu-2") is None


def test_the_environments_host_is_neither_deleted_nor_given_stored_credentials(
        db: Session, settings: Settings) -> None:
    default = repository.ensure_default_host(db)
    with pytest.raises(Conflict, match="environment"):
        service.delete_host(db, admin(db), default.name)
    with pytest.raises(Conflict, match="PORTAL_KUBECONFIG"):
        service.replace_credentials(db, admin(db), settings, default.name, HostCredentialsIn(
            kind="token", server="https://x.example.com", token=SECRET,
            ca_certificate=CA.cert_pem.decode()))


def test_update_changes_only_what_is_sent_and_null_limits_go_back_to_the_default(
        db: Session, settings: Settings) -> None:
    row = register(db, settings)
    service.update_host(db, admin(db), row.name, HostUpdate(kube_qps=50.0, kube_burst=100))
    service.update_host(db, admin(db), row.name, HostUpdate(description="EU, hall 2"))
    assert (row.kube_qps, row.kube_burst, row.description) == (50.0, 100, "EU, hall 2")
    service.update_host(db, admin(db), row.name, HostUpdate.model_validate({"kube_qps": None}))
    assert (row.kube_qps, row.kube_burst, row.region) == (None, 100, "eu-west")


def test_replacing_credentials_reseals_and_forgets_the_old_health(
        db: Session, settings: Settings) -> None:
    row = register(db, settings)
    service.store_health(row, [CheckResult("api-reachable", True, "Kubernetes v1.32")])
    service.replace_credentials(db, admin(db), settings, row.name, HostCredentialsIn(
        kind="token", server="https://gpu-eu-2b.example.com", token="other-" + SECRET,
        ca_certificate=CA.cert_pem.decode()))
    assert (row.credential_kind, row.api_endpoint) == ("token", "https://gpu-eu-2b.example.com")
    shown = service.host_out(row).health
    assert (shown.reachable, shown.checks, shown.checked_at) == (None, [], None)
    target = service.target_for(row, settings)
    assert target is not None and "other-" + SECRET in (target.kubeconfig_yaml or "")


def test_a_host_without_stored_credentials_other_than_the_default_has_no_target(
        db: Session, settings: Settings) -> None:
    default = repository.ensure_default_host(db)
    bare = factories.host_cluster(db)
    assert service.target_for(bare, settings) is None
    assert [t.host_id for t in service.targets(db, settings)] == [default.id]


def test_key_rotation_reseals_registered_credentials_so_the_new_key_alone_opens_them(
        database: Database, settings: Settings) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    before = settings.model_copy(update={"encryption_key": old})
    with database.transaction() as db:
        register(db, before)
    rotate_stored_secrets(database, SecretBox(new, [old]))
    after = settings.model_copy(update={"encryption_key": new, "encryption_old_keys": []})
    with database.transaction() as db:
        row = repository.host_by_name(db, "gpu-eu-2")
        assert row is not None
        target = service.target_for(row, after)
    assert target is not None and SECRET in (target.kubeconfig_yaml or "")
