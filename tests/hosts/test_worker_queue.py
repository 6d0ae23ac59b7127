"""Registering, editing and re-enabling a host enqueue its keys of the worker's kinds in the
same transaction: the worker looks at the host at once, not at the next resync."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.database.core import Database, utcnow
from app.hosts import repository, service
from app.hosts.models import HostCluster
from app.hosts.schemas import HostCredentialsIn, HostRegister, HostUpdate
from app.kit.config import Settings
from app.kube.memory import InMemoryKube
from app.lab.pki import CertificateAuthority
from app.reconcilers.hosts import HostHealthReconciler
from app.workqueue import HOSTS, NODES, USAGE, WEBHOOK
from app.workqueue.models import WorkItem
from app.workqueue.repository import items
from tests import factories
from tests.support.drive import run_due
from tests.support.kube import PerHostConnector
from tests.support.kube_server import kubeconfig_yaml

CA = CertificateAuthority()
SETTINGS = Settings(env="test", database_url="sqlite://", worker_resync_seconds=300)


def _register(db: Session, name: str = "gpu-eu-2") -> HostCluster:
    admin = Principal(user=factories.user(db, admin=True), via="token")
    service.register_host(db, admin, SETTINGS, HostRegister(
        name=name, region="eu", credentials=HostCredentialsIn(
            kind="kubeconfig", kubeconfig=kubeconfig_yaml(
                f"https://{name}.example.com:6443", CA.cert_pem, token="t"))))
    row = repository.host_by_name(db, name)
    assert row is not None
    return row


def _due_now(db: Session, host_id: int) -> set[str]:
    """The kinds whose key for the host (the webhook's one key) is due now."""
    now = utcnow()
    keys = {NODES: str(host_id), HOSTS: str(host_id), USAGE: str(host_id), WEBHOOK: "all"}
    return {kind for kind, key in keys.items()
            for item in items(db, kind) if item.key == key and item.due_at <= now}


def _as_after_a_pass(db: Session) -> None:
    db.execute(update(WorkItem).values(due_at=utcnow() + timedelta(hours=1)))


def test_registering_editing_and_reenabling_a_host_enqueue_its_keys(db: Session) -> None:
    admin = Principal(user=factories.user(db, admin=True), via="token")
    row = _register(db)
    assert _due_now(db, row.id) == {NODES, HOSTS, USAGE, WEBHOOK}

    _as_after_a_pass(db)
    service.update_host(db, admin, row.name, HostUpdate(webhook_url="https://hook.example"))
    assert _due_now(db, row.id) == {NODES, HOSTS, USAGE, WEBHOOK}

    _as_after_a_pass(db)
    service.set_state(db, admin, row.name, "cordoned")
    assert _due_now(db, row.id) == set()  # nothing the worker does changes with it
    service.set_state(db, admin, row.name, "active")
    assert _due_now(db, row.id) == {NODES, HOSTS, USAGE, WEBHOOK}

    _as_after_a_pass(db)
    service.replace_credentials(db, admin, SETTINGS, row.name, HostCredentialsIn(
        kind="kubeconfig", kubeconfig=kubeconfig_yaml("https://elsewhere.example.com:6443",
                                                      CA.cert_pem, token="u")))
    assert _due_now(db, row.id) == {NODES, HOSTS, USAGE, WEBHOOK}


def test_a_registered_host_is_checked_at_once(database: Database) -> None:
    with database.transaction() as db:
        factories.env_host(db)
    connector = PerHostConnector({"default": InMemoryKube(), "gpu-eu-2": InMemoryKube()})
    worker = HostHealthReconciler(SETTINGS, database, connector, None)
    assert run_due(worker, "w1") == 1  # the environment's host
    assert run_due(worker, "w1") == 0  # checked: due again at the resync
    with database.transaction() as db:
        host_id = _register(db).id
    assert run_due(worker, "w1") == 1
    with database.session() as db:
        row = repository.host_by_id(db, host_id)
        assert row is not None and row.health_checked_at is not None
