"""The machines reconciler against a real kube-apiserver with baremetal-operator's own CRD (no
operator running): what it writes passes the CRD's schema, a release takes the image off with
server-side apply, and a deletion leaves nothing behind."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import baremetal as metal3
from app.machines.models import Machine
from app.reconcilers.machines import MachineReconciler
from app.workqueue import MACHINES, enqueue
from tests import factories
from tests.kube.test_baremetal_real import metal3_host as metal3_host  # a fixture
from tests.nodes.conftest import Later
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.kube_server import ApiServer

pytestmark = pytest.mark.kube_server
NAME = "gpu-real-01"
BMH = (metal3.METAL3_API_VERSION, metal3.BAREMETAL_HOST)


@pytest.fixture
def adapter(metal3_host: ApiServer) -> Iterator[KubernetesAdapter]:
    adapter = metal3_host.adapter()
    yield adapter
    adapter.close()


def _ask(database: Database, machine_id: int, **values: object) -> None:
    with database.transaction() as db:
        db.execute(update(Machine).where(Machine.id == machine_id)
                   .values(generation=Machine.generation + 1, **values))
        enqueue(db, MACHINES, machine_id)


def test_provision_release_and_delete_on_a_real_api_server(
        database: Database, adapter: KubernetesAdapter, metal3_host: ApiServer,
        tmp_path: Path) -> None:
    with database.transaction() as db:
        machine_id = factories.machine(db, factories.env_host(db), factories.gpu_class(db),
                                       NAME, desired="provisioned").id
    kubeconfig = metal3_host.write_admin_kubeconfig(tmp_path / "host.yaml")
    settings = Settings(env="test", database_url="sqlite://", kubeconfig=str(kubeconfig))
    clock = Later()
    loop = MachineReconciler(settings, database, InMemoryConnector(adapter), now=clock)
    run_due(loop, "test")
    host = adapter.get(*BMH, NAME, metal3.MACHINES_NAMESPACE)
    assert host is not None and host["spec"]["image"]["url"] == settings.machine_image_url
    with database.session() as db:
        token_id = db.get(Machine, machine_id).bootstrap_token_id  # type: ignore[union-attr]
    assert token_id
    token = adapter.get("v1", "Secret", f"bootstrap-token-{token_id}", "kube-system")
    assert token is not None and token["type"] == metal3.BOOTSTRAP_TOKEN_TYPE
    user_data = adapter.get("v1", "Secret", f"{NAME}-user-data", metal3.MACHINES_NAMESPACE)
    assert user_data is not None
    assert metal3_host.url in base64.b64decode(user_data["data"]["userData"]).decode()

    _ask(database, machine_id, desired="pool")
    clock.later(60)
    run_due(loop, "test")
    host = adapter.get(*BMH, NAME, metal3.MACHINES_NAMESPACE)
    assert host is not None and "image" not in host["spec"] and "userData" not in host["spec"]

    _ask(database, machine_id, deleting_at=utcnow())
    clock.later(60)
    run_due(loop, "test")
    assert adapter.get(*BMH, NAME, metal3.MACHINES_NAMESPACE) is None
    assert adapter.get("v1", "Secret", f"{NAME}-bmc", metal3.MACHINES_NAMESPACE) is None
    assert adapter.get("v1", "Secret", f"{NAME}-user-data", metal3.MACHINES_NAMESPACE) is None
    with database.session() as db:
        assert db.get(Machine, machine_id) is None


def test_bmc_credentials_someone_else_changed_on_the_host_are_written_back(
        database: Database, adapter: KubernetesAdapter, metal3_host: ApiServer,
        tmp_path: Path) -> None:
    with database.transaction() as db:
        factories.machine(db, factories.env_host(db), factories.gpu_class(db), NAME,
                          password="calvin-and-hobbes")
    kubeconfig = metal3_host.write_admin_kubeconfig(tmp_path / "host.yaml")
    settings = Settings(env="test", database_url="sqlite://", kubeconfig=str(kubeconfig))
    clock = Later()
    loop = MachineReconciler(settings, database, InMemoryConnector(adapter), now=clock)
    run_due(loop, "test")
    name = f"{NAME}-bmc"
    adapter.apply({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "namespace": metal3.MACHINES_NAMESPACE},
                   "data": {"username": "", "password": ""}}, force=True, manager="someone")
    clock.later(60)
    run_due(loop, "test")
    secret = adapter.get("v1", "Secret", name, metal3.MACHINES_NAMESPACE) or {}
    assert base64.b64decode(secret["data"]["password"]).decode() == "calvin-and-hobbes"
