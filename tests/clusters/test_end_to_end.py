"""Done when: a tenant admin creates a cluster in the browser and watches its conditions turn
ready while the worker applies the objects to the Kubernetes emulator through the real adapter
and the stand-in helm brings up vc-<release>; resizing updates quota and queue; deleting
removes every object it made."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.auth.models import User
from app.clusters.reconciler import ClusterReconciler
from app.config import Settings
from app.db import Database
from app.kube.connector import ClientConnector
from app.main import create_app
from tests import factories
from tests.clusters.standin_helm import helm_calls, host_kubeconfig, install_standin_helm
from tests.clusters.support import Clock
from tests.kube.emulator import KubeEmulator
from tests.support import oidc
from tests.support.web import HTML, csrf_of

NAMESPACE = "t-acme--train"
OWN_OBJECTS = [
    ("v1", "Namespace", NAMESPACE, None),
    ("v1", "ResourceQuota", "tenant-quota", NAMESPACE),
    ("v1", "LimitRange", "tenant-defaults", NAMESPACE),
    ("networking.k8s.io/v1", "NetworkPolicy", "tenant-isolation", NAMESPACE),
    ("networking.k8s.io/v1", "NetworkPolicy", "vcluster-api-server", NAMESPACE),
    ("scheduling.run.ai/v2", "Queue", "acme", None),
    ("scheduling.run.ai/v2", "Queue", "acme--train", None),
    ("v1", "Secret", "vc-train", NAMESPACE),
    ("apps/v1", "StatefulSet", "train", NAMESPACE),
]


@pytest.fixture
def helm_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install_standin_helm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "helm-calls.jsonl"
    monkeypatch.setenv("HELM_STANDIN_LOG", str(log))
    return log


@pytest.fixture
def host_settings(settings: Settings, kube_emulator: KubeEmulator, tmp_path: Path) -> Settings:
    kubeconfig = host_kubeconfig(tmp_path / "host.kubeconfig", kube_emulator.url)
    return settings.model_copy(update={"kubeconfig": str(kubeconfig)})


@pytest.fixture
def portal(host_settings: Settings, database: Database) -> Iterator[TestClient]:
    app = create_app(host_settings, database, kube=ClientConnector(host_settings))
    with TestClient(app) as client:
        yield client




def sign_in_acme_admin(db: Session, oidc_issuer: str, client: TestClient) -> int:
    acme = factories.tenant(db, "acme", display_name="Acme Research")
    admin = User(email="ada@acme.example", name="")
    db.add(admin)
    db.flush()
    factories.membership(db, acme, admin, "admin")
    gpu = factories.gpu_class(db, display_name="H100 80GB")
    factories.quota(db, acme, gpu, 8)
    db.commit()
    oidc.register_user(oidc_issuer, "ada@acme.example", name="Ada Admin")
    oidc.sign_in(client, "ada@acme.example")
    return gpu.id


def status_of(client: TestClient) -> str:
    answer = client.get("/t/acme/clusters/train/status",
                        headers={**HTML, "HX-Request": "true"})
    assert answer.status_code == 200
    phase = re.search(r'data-phase="(\w+)"', answer.text)
    assert phase is not None
    return phase.group(1)


def test_create_watch_ready_resize_and_delete(
    portal: TestClient, db: Session, database: Database, oidc_issuer: str,
    host_settings: Settings, kube_emulator: KubeEmulator, helm_log: Path,
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, portal)
    page = portal.get("/t/acme/clusters", headers=HTML)
    csrf = csrf_of(page.text)
    fields = {"name": "train", "kubernetes_version": "1.32.4", "placement": "shared-pool",
              "gpu_class_id": str(gpu_id), "gpus": "4", "cpu_millicores": "8000",
              "memory_mib": "65536"}
    created = portal.post("/t/acme/clusters", data=fields,
                          headers={"HX-Request": "true", "X-CSRF-Token": csrf})
    assert created.headers["HX-Redirect"] == "/t/acme/clusters/train"
    detail = portal.get("/t/acme/clusters/train", headers=HTML)
    assert 'hx-trigger="every 2s"' in detail.text  # live progress while provisioning

    clock = Clock()
    worker = ClusterReconciler(host_settings, database, ClientConnector(host_settings),
                               clock=clock)
    phases = []
    for _ in range(4):
        clock.advance(301)
        worker.run_due("worker-1")
        phases.append(status_of(portal))
    assert phases[-1] == "Ready"
    ready_partial = portal.get("/t/acme/clusters/train/status", headers=HTML).text
    assert "every 2s" not in ready_partial  # polling stops once Ready
    assert 'hx-get="/t/acme/clusters/train/kubeconfigs"' in ready_partial
    for api_version, kind, name, namespace in OWN_OBJECTS:
        assert kube_emulator.stored(api_version, kind, name, namespace) is not None, kind
    install = helm_calls(helm_log)[0]
    argv = install["argv"]
    assert isinstance(argv, list) and argv[:5] == ["upgrade", "--install", "train", "vcluster",
                                                   "--repo"]
    assert argv[argv.index("--kubeconfig") + 1] == host_settings.kubeconfig
    assert argv[argv.index("--version") + 1] == host_settings.vcluster_chart_version
    assert yaml.safe_load(str(install["values"]))["exportKubeConfig"]["server"] == (
        "https://train.acme.vc.example.com")

    resized = portal.post("/t/acme/clusters/train/resize", headers={"X-CSRF-Token": csrf},
                          data={"gpus": "8", "cpu_millicores": "8000", "memory_mib": "65536"},
                          follow_redirects=False)
    assert resized.status_code == 303
    for _ in range(2):
        clock.advance(301)
        worker.run_due("worker-1")
    quota = kube_emulator.stored("v1", "ResourceQuota", "tenant-quota", NAMESPACE)
    queue = kube_emulator.stored("scheduling.run.ai/v2", "Queue", "acme--train")
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    assert queue is not None and queue["spec"]["resources"]["gpu"]["quota"] == 8
    assert status_of(portal) == "Ready"

    deleted = portal.post("/t/acme/clusters/train/delete", headers={"X-CSRF-Token": csrf},
                          follow_redirects=False)
    assert deleted.status_code == 303
    assert status_of(portal) == "Deleting"
    clock.advance(301)
    worker.run_due("worker-1")
    for api_version, kind, name, namespace in OWN_OBJECTS:
        assert kube_emulator.stored(api_version, kind, name, namespace) is None, kind
    last_call = helm_calls(helm_log)[-1]["argv"]
    assert isinstance(last_call, list) and last_call[0] == "uninstall"
    gone = portal.get("/t/acme/clusters/train/status", headers={**HTML, "HX-Request": "true"})
    assert gone.headers["HX-Redirect"] == "/t/acme/clusters"


def test_without_a_host_cluster_the_page_shows_what_would_be_applied(
    client: TestClient, db: Session, oidc_issuer: str, database: Database, settings: Settings
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf}, follow_redirects=False,
                data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "2",
                      "cpu_millicores": "4000", "memory_mib": "16384"})
    ClusterReconciler(settings, database, ClientConnector(settings)).run_due("worker-1")
    page = client.get("/t/acme/clusters/train", headers=HTML).text
    assert "HostClusterNotConfigured" in page
    assert 'id="no-host"' in page
    assert "kind: ResourceQuota" in page and "requests.nvidia.com/gpu: &#39;2&#39;" in page
    assert "exportKubeConfig:" in page
    assert "helm upgrade --install train vcluster --repo https://charts.loft.sh" in page
