"""Validation runs in the worker: the web process queues it (it holds no Kubernetes rights and
never calls the host), the worker's validator runs the checks with the worker's host cluster
and stores the result; offering waits for it."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.port import KubePort
from app.reconcilers.runtime import Runtime
from app.reconcilers.template_validation import TemplateValidator
from app.templates.models import ClusterTemplate, ClusterTemplateVersion
from app.workqueue import TEMPLATE_VALIDATION
from app.workqueue import repository as queue
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.kube_server import ApiServer, kubeconfig_yaml
from tests.support.tenancy import Tenancy, headers
from tests.support.web import free_port
from tests.templates.support import StandinCharts, training

TEMPLATES = "/api/v1/cluster-templates"


class NoHostInTheWeb:
    """The web process's connector: any use of the host cluster is a test failure."""

    def host(self) -> KubePort | None:
        raise AssertionError("the web process asked for the host cluster")

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        raise AssertionError("the web process asked for a virtual cluster")

    def ready(self, kubeconfig_yaml: str) -> bool:
        raise AssertionError("the web process asked for a virtual cluster")


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self):  # type: ignore[no-untyped-def]
        return self.now


def training_v1(db: Session) -> ClusterTemplateVersion:
    return db.query(ClusterTemplateVersion).join(ClusterTemplate).filter(
        ClusterTemplate.name == "training", ClusterTemplateVersion.version == 1).one()


def version(client: TestClient, admin: dict[str, str], number: int = 1) -> dict[str, object]:
    shown = client.get(f"{TEMPLATES}/training", headers=admin).json()["versions"]
    found: dict[str, object] = next(v for v in shown if v["version"] == number)
    return found


def test_the_web_queues_and_the_worker_validates_on_its_host(
        app_client: TestClient, db: Session, database: Database, tenancy: Tenancy,
        real_host: KubernetesAdapter, charts: StandinCharts) -> None:
    app_client.app.state.kube = NoHostInTheWeb()  # type: ignore[attr-defined]
    admin = headers(db, tenancy.platform_admin)
    app_client.post(TEMPLATES, json=training(tenancy.h100.id), headers=admin)
    queued = app_client.post(f"{TEMPLATES}/training/versions/1/validate", headers=admin)
    assert queued.status_code == 202, queued.text
    assert queued.json()["validation_pending"] is True and queued.json()["validation"] is None
    # Asking again while it waits changes nothing.
    again = app_client.post(f"{TEMPLATES}/training/versions/1/validate", headers=admin)
    assert again.json()["validation_requested_at"] == queued.json()["validation_requested_at"]
    refused = app_client.post(f"{TEMPLATES}/training/versions/1/offer", headers=admin)
    assert refused.status_code == 409
    assert refused.json()["errors"] == [
        {"field": "validation", "message": "the validation is pending"}]

    worker = TemplateValidator(app_client.app.state.settings,  # type: ignore[attr-defined]
                               database, InMemoryConnector(real_host), charts)
    assert run_due(worker, "worker-1") == 1
    assert run_due(worker, "worker-1") == 0
    done = version(app_client, admin)
    assert done["validation_pending"] is False
    assert done["validation"]["passed"] is True  # type: ignore[index]
    offered = app_client.post(f"{TEMPLATES}/training/versions/1/offer", headers=admin)
    assert offered.status_code == 200, offered.text


def test_the_worker_validates_on_every_open_host_and_skips_a_cordoned_one(
        app_client: TestClient, db: Session, database: Database, tenancy: Tenancy,
        kai_host: ApiServer, charts: StandinCharts) -> None:
    """Two registered hosts, each reached with its own credentials: the real test API server,
    and one whose API server is down, where the checks fail under its name. Once that host is
    cordoned (no new clusters go there) it is no longer checked."""
    admin = headers(db, tenancy.platform_admin)
    settings = app_client.app.state.settings  # type: ignore[attr-defined]
    # This worker has no PORTAL_KUBECONFIG: the environment's host takes no new clusters.
    hosts_repository.ensure_default_host(db)
    env_host = app_client.post("/api/v1/host-clusters/default/cordon", headers=admin, json={})
    assert env_host.status_code == 200, env_host.text
    down = kubeconfig_yaml(f"https://127.0.0.1:{free_port()}", kai_host.ca.cert_pem, token="t")
    for name, kubeconfig in (("gpu-eu-1", kai_host.admin_kubeconfig), ("gpu-us-1", down)):
        registered = app_client.post("/api/v1/host-clusters", headers=admin, json={
            "name": name, "region": name[4:6],
            "credentials": {"kind": "kubeconfig", "kubeconfig": kubeconfig}})
        assert registered.status_code == 201, registered.text
    worker = TemplateValidator(settings, database, ClientConnector(settings), charts)
    app_client.post(TEMPLATES, json=training(tenancy.h100.id), headers=admin)
    app_client.post(f"{TEMPLATES}/training/versions/1/validate", headers=admin)
    assert run_due(worker, "worker-1") == 1
    shown = version(app_client, admin)["validation"]
    failed = {c["name"]: c["reasons"] for c in shown["checks"]  # type: ignore[index]
              if not c["passed"]}
    assert "host-dry-run" in failed and set(failed) <= {"host-dry-run", "host-support"}
    assert {r.split(":")[0] for reasons in failed.values() for r in reasons} == {"gpu-us-1"}
    assert "Connection refused" in failed["host-dry-run"][0]

    cordoned = app_client.post("/api/v1/host-clusters/gpu-us-1/cordon", headers=admin, json={})
    assert cordoned.status_code == 200, cordoned.text
    app_client.post(f"{TEMPLATES}/training/versions/1/validate", headers=admin)
    assert run_due(worker, "worker-1") == 1
    assert version(app_client, admin)["validation"]["passed"] is True  # type: ignore[index]


def test_a_validation_whose_worker_died_is_taken_again_once_its_lease_runs_out(
        app_client: TestClient, db: Session, database: Database, tenancy: Tenancy,
        charts: StandinCharts) -> None:
    admin = headers(db, tenancy.platform_admin)
    app_client.post(TEMPLATES, json=training(tenancy.h100.id), headers=admin)
    app_client.post(f"{TEMPLATES}/training/versions/1/validate", headers=admin)
    clock = Clock()
    settings = app_client.app.state.settings  # type: ignore[attr-defined]
    dead = TemplateValidator(settings, database, InMemoryConnector(None), charts, clock=clock)
    # Claimed, then the worker died before storing.
    assert Runtime(database, [dead], clock=clock, identity="worker-1").claim(1) != []
    other = TemplateValidator(settings, database, InMemoryConnector(None), charts, clock=clock)
    assert run_due(other, "worker-2") == 0
    assert version(app_client, admin)["validation_pending"] is True
    clock.now += timedelta(seconds=settings.worker_lease_seconds + 1)
    assert run_due(other, "worker-2") == 1
    done = version(app_client, admin)
    assert done["validation_pending"] is False
    # No host cluster in this worker: the host checks fail, with that reason.
    failed = {c["name"] for c in done["validation"]["checks"]  # type: ignore[index]
              if not c["passed"]}
    assert failed == {"host-dry-run", "host-support"}
    assert queue.items(db, TEMPLATE_VALIDATION) == []  # done with: the queue forgets it


def test_a_validation_request_enqueues_its_version_due_at_once(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    admin = headers(db, tenancy.platform_admin)
    app_client.post(TEMPLATES, json=training(tenancy.h100.id), headers=admin)
    assert queue.items(db, TEMPLATE_VALIDATION) == []
    before = utcnow()
    app_client.post(f"{TEMPLATES}/training/versions/1/validate", headers=admin)
    row = training_v1(db)
    [item] = queue.items(db, TEMPLATE_VALIDATION)
    assert item.key == str(row.id)
    assert before - timedelta(seconds=1) <= item.due_at <= utcnow()


def test_a_version_no_longer_requested_is_forgotten(
        app_client: TestClient, db: Session, database: Database, tenancy: Tenancy,
        charts: StandinCharts) -> None:
    admin = headers(db, tenancy.platform_admin)
    app_client.post(TEMPLATES, json=training(tenancy.h100.id), headers=admin)
    app_client.post(f"{TEMPLATES}/training/versions/1/validate", headers=admin)
    row = training_v1(db)
    row.validation_requested_at = None  # as if it had been validated meanwhile
    db.commit()
    worker = TemplateValidator(app_client.app.state.settings,  # type: ignore[attr-defined]
                               database, InMemoryConnector(None), charts)
    assert run_due(worker, "worker-1") == 1
    assert queue.items(db, TEMPLATE_VALIDATION) == []
    db.refresh(row)
    assert row.validation is None  # nothing ran


def test_a_check_that_crashes_fails_the_validation_with_its_reason(
        app_client: TestClient, db: Session, database: Database, tenancy: Tenancy) -> None:
    class Broken:
        def lookup(self, repo: str, chart: str, version: str) -> None:
            raise RuntimeError("resolver exploded")

    admin = headers(db, tenancy.platform_admin)
    app_client.post(TEMPLATES, json=training(tenancy.h100.id), headers=admin)
    app_client.post(f"{TEMPLATES}/training/versions/1/validate", headers=admin)
    run_due(TemplateValidator(app_client.app.state.settings,  # type: ignore[attr-defined]
                              database, InMemoryConnector(None), Broken()),  # type: ignore[arg-type]
            "w")
    done = version(app_client, admin)
    assert done["validation_pending"] is False
    assert done["validation"] == {"passed": False, "note": None, "checks": [
        {"name": "validation", "passed": False,
         "reasons": ["the validation stopped: RuntimeError: resolver exploded"]}]}
