"""Every metric docs/operator.md §13 names, read back through a real Prometheus after a known
sequence: `portal serve --workers 2` on PostgreSQL (its processes' values merged), `portal
worker` with a real kube-apiserver as its host and a registered host that does not answer, a
stand-in DCGM exporter page with one tenant GPU at 0 %, a real SMTP server that refuses the
tenant admin's mailbox for now (450), and the alerting rules loaded.

The sequence: three GETs of the tenant list and two of an unknown path; a tenant and two quota
requests through the API, one approved; a one-GPU cluster on the real host (the stand-in helm
installs it once; its control plane never answers, so it stays Provisioning); a bare-metal
machine registered; then the idle window (1 minute) runs out. The two requests are emailed to
the platform admin (delivered), the approval to the tenant admin (tried again later: pending).
``expectations`` says what Prometheus must then give; a metric §13 documents without a row
there fails ``test_every_documented_metric_is_read_back``, so a new metric comes with its
read-back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.database.core import Database
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kube.manifests.names import host_namespace_name
from app.tenants.models import Tenant
from tests import factories
from tests.support import smtp
from tests.support.http_servers import metrics_page
from tests.support.kube_server import MISSING as NO_KUBE_ASSETS
from tests.support.kube_server import (
    ApiServer,
    install_crds,
    kube_assets,
    kubeconfig_yaml,
    skip_unless_ci,
)
from tests.support.paths import KAI_QUEUE_CRD, ROOT
from tests.support.principals import bearer
from tests.support.prometheus import Prometheus, ScrapeJob, running_prometheus
from tests.support.smtp import Mailbox, smtp_server
from tests.support.waiting import wait_for
from tests.support.web import free_port

pytestmark = [pytest.mark.kube_server, pytest.mark.xdist_group("metrics-through-prometheus")]

OPERATOR_GUIDE = ROOT / "docs" / "operator.md"
RULES = ROOT / "deploy" / "prometheus" / "portal-rules.yaml"
TENANT, CLUSTER = "metrics-acme", "train"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
REQUESTED, APPROVED = 4, 3
# The idle window (1 minute, the floor), the worker's 30 s cache of it, a few scrapes.
READ_BACK_SECONDS = 240.0
STARTS_WITHIN = 180.0


@dataclass(frozen=True)
class Expect:
    """``query`` through Prometheus' API gives one sample for which ``holds`` (None: no
    sample) is true; ``want`` says so in words."""

    query: str
    want: str
    holds: Callable[[float | None], bool]


def equal(query: str, value: float) -> Expect:
    return Expect(query, f"== {value:g}", lambda found: found == value)


def at_least(query: str, value: float) -> Expect:
    return Expect(query, f">= {value:g}", lambda found: found is not None and found >= value)


@dataclass(frozen=True)
class Known:
    """What the sequence made: the hosts' ids (the breaker and helm label hosts by id)."""

    host: int
    dead_host: int


def expectations(known: Known) -> dict[str, list[Expect]]:
    web, worker = 'job="portal-web"', 'job="portal-worker"'
    tenant = f'tenant="{TENANT}",gpu_class="{PRODUCT}"'
    return {
        "portal_http_requests_total": [
            equal(f'sum(portal_http_requests_total{{{web},route="/api/v1/tenants",'
                  'method="GET",status="200"})', 3),
            equal(f'sum(portal_http_requests_total{{{web},route="unmatched",method="GET",'
                  'status="404"})', 2)],
        "portal_http_request_duration_seconds": [
            equal(f'sum(portal_http_request_duration_seconds_count{{{web},'
                  'route="/api/v1/tenants",method="GET"})', 3)],
        "portal_reconcile_total": [
            at_least(f'sum(portal_reconcile_total{{{worker},outcome="host_unreachable"}})', 1),
            at_least(f'sum(portal_reconcile_total{{{worker},kind="quota-expiry",'
                     'outcome="success"})', 1)],
        "portal_reconcile_duration_seconds": [
            at_least(f'sum(portal_reconcile_duration_seconds_count{{{worker},'
                     'kind="clusters"})', 1)],
        "portal_worker_last_pass_timestamp_seconds": [
            Expect(f"time() - portal_worker_last_pass_timestamp_seconds{{{worker}}}",
                   "a pass within 30 s", lambda age: age is not None and age < 30)],
        "portal_host_breaker_open": [
            equal(f'portal_host_breaker_open{{{worker},host="{known.dead_host}"}}', 1)],
        "portal_helm_install_duration_seconds": [
            equal(f'portal_helm_install_duration_seconds_count{{{worker},'
                  f'host="{known.host}"}}', 1)],
        "portal_workqueue_depth": [
            at_least(f'portal_workqueue_depth{{{worker},kind="clusters"}}', 0)],
        "portal_workqueue_oldest_due_age_seconds": [
            at_least(f'portal_workqueue_oldest_due_age_seconds{{{worker},kind="clusters"}}',
                     0)],
        "portal_tenant_gpus": [
            equal(f'portal_tenant_gpus{{{worker},{tenant},state="approved"}}', APPROVED),
            equal(f'portal_tenant_gpus{{{worker},{tenant},state="allocated"}}', 1)],
        "portal_quota_requests_pending": [
            equal(f"portal_quota_requests_pending{{{worker}}}", 1)],
        "portal_quota_request_oldest_pending_age_seconds": [
            Expect(f"portal_quota_request_oldest_pending_age_seconds{{{worker}}}",
                   "> 0", lambda age: age is not None and age > 0)],
        "portal_clusters": [equal(f'portal_clusters{{{worker},phase="Provisioning"}}', 1)],
        "portal_machines": [equal(f"sum(portal_machines{{{worker}}})", 1)],
        "portal_tenant_idle_gpus": [equal(f"portal_tenant_idle_gpus{{{worker},{tenant}}}", 1)],
        "portal_utilisation_known": [equal(f"portal_utilisation_known{{{worker}}}", 1)],
        "portal_notifications_total": [
            at_least(f'sum(portal_notifications_total{{{worker},channel="email",'
                     'outcome="delivered"})', 2),
            at_least(f'sum(portal_notifications_total{{{worker},channel="email",'
                     'outcome="retry"})', 1)],
        "portal_notification_deliveries_pending": [
            at_least(f'portal_notification_deliveries_pending{{{worker},channel="email"}}', 1),
            equal(f'portal_notification_deliveries_pending{{{worker},channel="webhook"}}', 0)],
        "portal_db_pool_connections_in_use": [
            at_least(f'portal_db_pool_connections_in_use{{{web},process="web"}}', 0),
            at_least(f'portal_db_pool_connections_in_use{{{worker},process="worker"}}', 0)],
        "portal_db_pool_checkout_wait_seconds": [
            at_least(f"portal_db_pool_checkout_wait_seconds_count{{{web}}}", 3),
            at_least(f"portal_db_pool_checkout_wait_seconds_count{{{worker}}}", 1)],
        # Not a metric of the portal's: the rules loaded, the dead host's alert on its way.
        "ALERTS": [equal('ALERTS{alertname="PortalHostUnreachable",alertstate="pending",'
                         f'host="{known.dead_host}"}}', 1)],
    }


def documented_metrics() -> list[str]:
    """The first column of §13's table."""
    text = OPERATOR_GUIDE.read_text()
    section = text[text.index("\n## 13. Metrics"):text.index("\n## 14.")]
    return re.findall(r"^\| `(portal_\w+)` \|", section, flags=re.MULTILINE)


def test_every_documented_metric_is_read_back() -> None:
    documented = documented_metrics()
    assert len(documented) >= 18
    missing = set(documented) - set(expectations(Known(1, 2)))
    assert not missing, f"documented in operator.md §13 without a read-back here: {missing}"


# ----- the sequence


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ApiServer]:
    """A host of this test's own: the worker's every kind acts on it (platform objects,
    webhook, inventory), which on the run's shared host would touch other tests' objects."""
    assets = kube_assets()
    if assets is None:
        skip_unless_ci(NO_KUBE_ASSETS)
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None  # noqa: S108 - private mkdtemp
    server = ApiServer(assets, Path(tempfile.mkdtemp(prefix="kube-metrics-", dir=base)),
                       name="metrics")
    server.start()
    adapter = server.adapter()
    try:
        install_crds(adapter, KAI_QUEUE_CRD)
    finally:
        adapter.close()
    yield server
    server.stop()


@dataclass
class Seeded:
    known: Known
    admin: dict[str, str]
    tenant_admin: dict[str, str]
    tenant_admin_email: str
    gpu_class_id: int


def _seed(database: Database, dead_host_url: str, ca_pem: bytes) -> Seeded:
    """The callers and their tokens, the GPU class, the environment's host and a registered
    one nothing answers for, and a machine registered on the first."""
    with database.transaction() as db:
        admin = factories.user(db, "metrics-admin@example.com", admin=True)
        tenant_admin = factories.user(db, "metrics-tenant-admin@example.com")
        gpu = factories.gpu_class(db, PRODUCT)
        host = factories.env_host(db)
        dead = factories.registered_host(db, "metrics-dead", webhook=False)
        box = SecretBox.from_settings(Settings(env="test", database_url="sqlite://"))
        dead.credentials_encrypted = box.seal(kubeconfig_yaml(
            dead_host_url, ca_pem, name="metrics-dead", token="nobody-answers"))
        factories.machine(db, host, gpu, "metrics-machine")
        return Seeded(Known(host.id, dead.id), bearer(db, admin), bearer(db, tenant_admin),
                      tenant_admin.email, gpu.id)


def _cluster(database: Database) -> None:
    """A one-GPU cluster of the tenant on the environment's host, as the service would enqueue
    it (the API would place it only on a host with GPU nodes of the class)."""
    with database.transaction() as db:
        tenant = db.scalars(select(Tenant).where(Tenant.slug == TENANT)).one()
        gpu = db.scalars(select(GpuClass).where(GpuClass.product == PRODUCT)).one()
        factories.cluster(db, tenant, factories.env_host(db), CLUSTER, gpu_class_id=gpu.id,
                          gpus=1)


def _portal_env(database: Database, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PORTAL_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    return {**env, "PORTAL_ENV": "test",
            "PORTAL_DATABASE_URL": database.engine.url.render_as_string(hide_password=False),
            **extra}


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=10).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def _running(argv: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """A portal process for the block; its output in ``log``, for a failure's reading."""
    with log.open("wb") as sink:
        process = subprocess.Popen([sys.executable, "-m", "app.process.cli", *argv], env=env,
                                   cwd=ROOT, stdout=sink, stderr=sink)
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=60)


def _smtp_env(mailbox: Mailbox) -> dict[str, str]:
    return {"PORTAL_SMTP_HOST": smtp.HOST, "PORTAL_SMTP_PORT": str(mailbox.port),
            "PORTAL_SMTP_USERNAME": smtp.USERNAME, "PORTAL_SMTP_PASSWORD": smtp.PASSWORD,
            "PORTAL_SMTP_FROM": smtp.SENDER, "PORTAL_SMTP_CA_FILE": str(mailbox.ca_file)}


def _exporter_page(labels: dict[str, str], utilisation: float) -> bytes:
    """The DCGM exporter's page for one GPU, its names and labels."""
    named = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return (f"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{{{named}}} {utilisation}\n"
            f"# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{{{named}}} 0\n").encode()


def _standin_helm(folder: Path) -> Path:
    """A helm that installs nothing and succeeds: the release's Secret never comes, so the
    cluster waits for its control plane (Provisioning) after one install."""
    folder.mkdir(parents=True, exist_ok=True)
    helm = folder / "helm"
    helm.write_text("#!/bin/sh\nexit 0\n")
    helm.chmod(0o755)
    return helm


def _requests(base: str, seeded: Seeded) -> None:
    """What the web processes count: 3 lists, 2 unknown paths; the tenant and its quota."""
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(3):
            assert client.get("/api/v1/tenants", headers=seeded.admin).status_code == 200
        for _ in range(2):
            assert client.get("/no/such/page", headers=seeded.admin).status_code == 404
        made = client.post("/api/v1/tenants", headers=seeded.admin, json={
            "slug": TENANT, "display_name": "Metrics Acme",
            "admin_email": seeded.tenant_admin_email})
        assert made.status_code == 201, made.text
        asked = [client.post(f"/api/v1/tenants/{TENANT}/quota-requests",
                             headers=seeded.tenant_admin,
                             json={"gpu_class_id": seeded.gpu_class_id, "gpus": REQUESTED,
                                   "reason": "metrics read back"}) for _ in range(2)]
        assert [a.status_code for a in asked] == [201, 201], [a.text for a in asked]
        approved = client.post(f"/api/v1/quota-requests/{asked[0].json()['id']}/approve",
                               headers=seeded.admin,
                               json={"gpus": APPROVED, "overcommit": True})
        assert approved.status_code == 200, approved.text


def _read_back(prometheus: Prometheus, expected: dict[str, list[Expect]],
               logs: list[Path]) -> None:
    def failing() -> list[str]:
        found = []
        for name, rows in expected.items():
            for row in rows:
                value = prometheus.value(row.query)
                if not row.holds(value):
                    found.append(f"{name}: {row.query} gave {value}, want {row.want}")
        return found

    last: list[str] = []

    def all_hold() -> bool:
        nonlocal last
        last = failing()
        return not last

    def found() -> str:
        tails = [f"--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}" for log in logs]
        return "\n".join(["every metric as expected; not yet:", *last, *tails])

    wait_for(all_hold, found, timeout=READ_BACK_SECONDS, every=2.0)


def test_each_documented_metric_reads_back_as_the_sequence_left_it(
        own_pg_database: Database, host: ApiServer, tmp_path: Path) -> None:
    seeded = _seed(own_pg_database, f"https://127.0.0.1:{free_port()}", host.ca.cert_pem)
    port, web_metrics, worker_metrics = free_port(), free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    gpu = {"gpu": "0", "UUID": "GPU-metrics-0", "device": "nvidia0",
           "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "pool-1",
           "namespace": host_namespace_name(TENANT, CLUSTER), "pod": "train-0",
           "container": "main"}
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    jobs = [ScrapeJob("portal-web", [f"127.0.0.1:{web_metrics}"]),
            ScrapeJob("portal-worker", [f"127.0.0.1:{worker_metrics}"])]
    page = _exporter_page(gpu, 0.0)
    with smtp_server(tmp_path) as mailbox, metrics_page(lambda: page) as exporter, \
            running_prometheus(tmp_path / "prometheus", [*jobs, ScrapeJob("dcgm-exporter",
                               [exporter])], rule_files=[RULES]) as prometheus:
        serve = _portal_env(own_pg_database, TMPDIR=str(scratch),
                            PORTAL_METRICS_ADDRESS=f"127.0.0.1:{web_metrics}")
        worker = _portal_env(
            own_pg_database, PORTAL_WORKER_METRICS_ADDRESS=f"127.0.0.1:{worker_metrics}",
            PORTAL_PROMETHEUS_URL=prometheus.url, PORTAL_IDLE_GPU_WINDOW_MINUTES="1",
            PORTAL_KUBECONFIG=str(host.write_admin_kubeconfig(tmp_path / "host.kubeconfig")),
            PORTAL_HELM_BINARY=str(_standin_helm(tmp_path / "bin")),
            PORTAL_VCLUSTER_CHART_REPO=f"http://127.0.0.1:{free_port()}",
            PORTAL_WORKER_POLL_SECONDS="0.5", **_smtp_env(mailbox))
        mailbox.refuse[seeded.tenant_admin_email] = "450 4.2.1 Mailbox busy, try again later"
        with _running(["serve", "--port", str(port), "--workers", "2"], serve,
                      tmp_path / "serve.log"), \
                _running(["worker"], worker, tmp_path / "worker.log"):
            wait_for(lambda: _answers(f"{base}/healthz"), f"portal serve on {base}",
                     timeout=STARTS_WITHIN)
            _requests(base, seeded)
            _cluster(own_pg_database)
            _read_back(prometheus, expectations(seeded.known),
                       [tmp_path / "serve.log", tmp_path / "worker.log"])
