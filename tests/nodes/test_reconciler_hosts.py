"""Inventory sync per registered host, on the real host API server: each host's nodes come
through that host's own client and land on that host's rows; a host that cannot be reached
is logged and retried through the queue, and the others are synced all the same."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import select

from app.auth.principal import Principal
from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from app.hosts.models import HostCluster
from app.hosts.schemas import HostCredentialsIn, HostRegister
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kube.connector import ClientConnector
from app.nodes.inventory import read_node
from app.nodes.models import Node
from app.reconcilers.nodes import NodeReconciler
from app.workqueue import NODES
from app.workqueue.repository import items
from tests import factories
from tests.nodes.conftest import RACK_LABEL, Fleet
from tests.support.drive import run_due
from tests.support.kube_server import kubeconfig_yaml
from tests.support.web import free_port

pytestmark = pytest.mark.kube_server


def _register(database: Database, settings: Settings, name: str, kubeconfig: str) -> None:
    with database.transaction() as db:
        principal = Principal(user=factories.user(db, admin=True), via="token")
        hosts_service.register_host(db, principal, settings, HostRegister(
            name=name, region=name, credentials=HostCredentialsIn(kind="kubeconfig",
                                                                  kubeconfig=kubeconfig)))


def _nodes_by_host(database: Database) -> dict[str, set[str]]:
    with database.transaction() as db:
        rows = db.execute(select(Node.name, Node.host_cluster_id).where(
            Node.gone_at.is_(None))).all()
        names = {h.id: h.name for h in hosts_repository.all_hosts(db)}
    found: dict[str, set[str]] = {}
    for node, host_id in rows:
        found.setdefault(names[host_id], set()).add(node)
    return found


def test_each_registered_host_syncs_with_its_own_client_and_a_dead_one_stops_nothing(
        fleet: Fleet, database: Database, caplog: pytest.LogCaptureFixture) -> None:
    # No PORTAL_KUBECONFIG: the environment's host reaches nothing, the registered ones do.
    settings = Settings(env="test", database_url="sqlite://", rack_label=RACK_LABEL,
                        worker_resync_seconds=300)
    dead = kubeconfig_yaml(f"https://127.0.0.1:{free_port()}", fleet.api.ca.cert_pem,
                           token="t")
    _register(database, settings, "a-dead-host", dead)
    _register(database, settings, "gpu-eu-2", fleet.api.admin_kubeconfig)
    with database.transaction() as db:  # stored before validation refused such things
        db.add(HostCluster(name="a-broken-host", credential_kind="kubeconfig",
                           credentials_encrypted=SecretBox.from_settings(settings).seal(
                               "users: [{name: a, user: {client-key-data: '!!!'}}]")))
    gpu_nodes = {name for name in fleet.names
                 if read_node(fleet.node(name), RACK_LABEL) is not None}
    started = utcnow()  # the clock stands still: however long a pass takes, no retry falls due
    reconciler = NodeReconciler(settings, database, ClientConnector(settings),
                                now=lambda: started)
    with caplog.at_level(logging.WARNING):
        run_due(reconciler, "worker-1")
    assert _nodes_by_host(database) == {"gpu-eu-2": gpu_nodes}
    assert "listing the nodes of host cluster a-dead-host failed" in caplog.text
    assert "host cluster a-broken-host: no client from its credentials" in caplog.text
    with database.session() as db:
        failed = {item.key: item for item in items(db, NODES) if item.last_error}
        names = {str(h.id): h.name for h in hosts_repository.all_hosts(db)}
    assert sorted(names[key] for key in failed) == ["a-broken-host", "a-dead-host"]
    assert run_due(reconciler, "worker-1") == 0  # the dead host is retried later, nothing breaks
    assert _nodes_by_host(database) == {"gpu-eu-2": gpu_nodes}
