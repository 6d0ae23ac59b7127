"""Done when: a tenant admin creates a cluster in the browser-facing pages and watches its
conditions turn ready while the worker applies the objects to a real host API server (etcd +
kube-apiserver 1.32 + controller-manager, with KAI's Queue CRD) through the real adapter, and
the stand-in helm, run by the real HelmInstaller over TLS with the host kubeconfig, brings up
vc-<release> holding the admin kubeconfig of a second real API server (the virtual cluster,
whose /readyz must answer); resizing updates quota and queue on the server; deleting waits
for the controller-manager to finalise the namespace and removes every object it made."""

from __future__ import annotations

import base64
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.auth.models import User
from app.database.core import Database
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import labels as lbl
from app.process.asgi import create_app
from app.reconcilers.clusters import ClusterReconciler
from tests import factories
from tests.clusters.cleanup import own_objects as cluster_host_objects
from tests.clusters.cleanup import remove_tenant_objects
from tests.clusters.standin_helm import helm_calls, use_standin_helm
from tests.clusters.support import Clock
from tests.support import oidc
from tests.support.drive import run_due
from tests.support.kube_server import ApiServer
from tests.support.web import HTML, csrf_of

QUEUE = lbl.KAI_API_VERSION
DELETE_TIMEOUT = 90.0


def own_objects(slug: str) -> list[tuple[str, str, str, str | None]]:
    """The cluster's host objects, and what the stand-in helm left in its namespace."""
    namespace = f"t-{slug}--train"
    return [*cluster_host_objects(slug), ("v1", "Secret", "vc-train", namespace),
            ("apps/v1", "StatefulSet", "train", namespace)]


@pytest.fixture
def slug(host_admin: KubernetesAdapter) -> Iterator[str]:
    """A tenant slug of its own (the host is shared by the run); what it left is removed."""
    slug = f"e2e-{secrets.token_hex(3)}"
    yield slug
    remove_tenant_objects(host_admin, slug)


@pytest.fixture
def helm_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, virtual_api: ApiServer) -> Path:
    return use_standin_helm(tmp_path / "helm", monkeypatch, virtual_api.admin_kubeconfig)


@pytest.fixture
def host_settings(settings: Settings, host_api: ApiServer, tmp_path: Path) -> Settings:
    kubeconfig = host_api.write_admin_kubeconfig(tmp_path / "host.kubeconfig")
    return settings.model_copy(update={"kubeconfig": str(kubeconfig)})


@pytest.fixture
def portal(host_settings: Settings, database: Database) -> Iterator[TestClient]:
    app = create_app(host_settings, database, kube=ClientConnector(host_settings))
    with TestClient(app) as client:
        yield client


def sign_in_acme_admin(db: Session, oidc_issuer: str, client: TestClient,
                  slug: str = "acme") -> int:
    acme = factories.tenant(db, slug, display_name="Acme Research")
    email = f"ada@{slug}.example"
    admin = User(email=email, name="")
    db.add(admin)
    db.flush()
    factories.membership(db, acme, admin, "admin")
    gpu = factories.gpu_class(db, display_name="H100 80GB")
    factories.quota(db, acme, gpu, 8)
    db.commit()
    oidc.register_user(oidc_issuer, email, name="Ada Admin")
    oidc.sign_in(client, email)
    return gpu.id


def status_of(client: TestClient, slug: str = "acme") -> str:
    answer = client.get(f"/t/{slug}/clusters/train/status",
                        headers={**HTML, "HX-Request": "true"})
    assert answer.status_code == 200
    phase = re.search(r'data-phase="(\w+)"', answer.text)
    assert phase is not None
    return phase.group(1)


@pytest.mark.kube_server
def test_create_watch_ready_resize_and_delete(
    portal: TestClient, db: Session, database: Database, oidc_issuer: str,
    host_settings: Settings, host_admin: KubernetesAdapter, virtual_api: ApiServer, helm_log: Path,
    slug: str,
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, portal, slug)
    page = portal.get(f"/t/{slug}/clusters", headers=HTML)
    csrf = csrf_of(page.text)
    fields = {"name": "train", "kubernetes_version": "1.32.4", "placement": "shared-pool",
              "gpu_class_id": str(gpu_id), "gpus": "4", "cpu_millicores": "8000",
              "memory_mib": "65536"}
    created = portal.post(f"/t/{slug}/clusters", data=fields,
                          headers={"HX-Request": "true", "X-CSRF-Token": csrf})
    assert created.headers["HX-Redirect"] == f"/t/{slug}/clusters/train"
    detail = portal.get(f"/t/{slug}/clusters/train", headers=HTML)
    assert f'sse-connect="/live/t/{slug}/clusters/train"' in detail.text  # live progress

    clock = Clock()
    worker = ClusterReconciler(host_settings, database, ClientConnector(host_settings),
                               clock=clock, wait_seconds=0.5)

    def run() -> None:
        clock.advance(301)  # later than any backoff, lease or resync
        run_due(worker, "worker-1")

    phases = []
    for _ in range(4):
        run()
        phases.append(status_of(portal, slug))
    assert phases[-1] == "Ready", phases
    ready_partial = portal.get(f"/t/{slug}/clusters/train/status", headers=HTML).text
    assert "updates live" not in ready_partial  # nothing more to wait for once Ready
    assert f'hx-get="/t/{slug}/clusters/train/kubeconfigs"' in ready_partial
    namespace = f"t-{slug}--train"
    for api_version, kind, name, ns in own_objects(slug):
        assert host_admin.get(api_version, kind, name, ns) is not None, f"{kind} {name} is missing"
    secret = host_admin.get("v1", "Secret", "vc-train", namespace)
    assert secret is not None
    config = base64.b64decode(secret["data"]["config"]).decode()
    assert config == (helm_log.parent / "vcluster.kubeconfig").read_text()  # as handed to helm
    assert yaml.safe_load(config)["clusters"][0]["cluster"]["server"] == virtual_api.url
    install = helm_calls(helm_log)[0]
    argv = install["argv"]
    assert isinstance(argv, list) and argv[:5] == ["upgrade", "--install", "train", "vcluster",
                                                   "--repo"]
    assert argv[argv.index("--kubeconfig") + 1] == host_settings.kubeconfig
    assert argv[argv.index("--version") + 1] == host_settings.vcluster_chart_version
    assert argv[argv.index("--namespace") + 1] == namespace
    assert yaml.safe_load(str(install["values"]))["exportKubeConfig"]["server"] == (
        f"https://train.{slug}.vc.example.com")

    resized = portal.post(f"/t/{slug}/clusters/train/resize", headers={"X-CSRF-Token": csrf},
                          data={"gpus": "8", "cpu_millicores": "8000", "memory_mib": "65536"},
                          follow_redirects=False)
    assert resized.status_code == 303
    for _ in range(2):
        run()
    quota = host_admin.get("v1", "ResourceQuota", "tenant-quota", namespace)
    queue = host_admin.get(QUEUE, "Queue", f"{slug}--train")
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    assert queue is not None and queue["spec"]["resources"]["gpu"]["quota"] == 8
    assert status_of(portal, slug) == "Ready"

    deleted = portal.post(f"/t/{slug}/clusters/train/delete", headers={"X-CSRF-Token": csrf},
                          data={"confirm_name": "train"}, follow_redirects=False)
    assert deleted.status_code == 303
    assert status_of(portal, slug) == "Deleting"
    # the controller-manager finalises the namespace in a few seconds: passes until it has
    deadline = time.monotonic() + DELETE_TIMEOUT
    while True:
        run()
        gone = portal.get(f"/t/{slug}/clusters/train/status",
                          headers={**HTML, "HX-Request": "true"})
        if "HX-Redirect" in gone.headers:
            break
        assert time.monotonic() < deadline, "the cluster outlived the namespace timeout"
        assert 'data-phase="Deleting"' in gone.text
        time.sleep(0.5)
    assert gone.headers["HX-Redirect"] == f"/t/{slug}/clusters"
    for api_version, kind, name, ns in own_objects(slug):
        assert host_admin.get(api_version, kind, name, ns) is None, f"{kind} {name} remains"
    last_call = helm_calls(helm_log)[-1]["argv"]
    assert isinstance(last_call, list) and last_call[0] == "uninstall"


def test_without_a_host_cluster_the_page_shows_what_would_be_applied(
    client: TestClient, db: Session, oidc_issuer: str, database: Database, settings: Settings
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf}, follow_redirects=False,
                data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "2",
                      "cpu_millicores": "4000", "memory_mib": "16384"})
    run_due(ClusterReconciler(settings, database, ClientConnector(settings)), "worker-1")
    page = client.get("/t/acme/clusters/train", headers=HTML).text
    assert "HostClusterNotConfigured" in page
    assert 'id="no-host"' in page
    assert "kind: ResourceQuota" in page and "requests.nvidia.com/gpu: &#39;2&#39;" in page
    assert "exportKubeConfig:" in page
    assert "helm upgrade --install train vcluster --repo https://charts.loft.sh" in page
