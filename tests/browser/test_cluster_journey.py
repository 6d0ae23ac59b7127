"""Done when of the cluster lifecycle, in a real browser: a tenant admin creates a cluster and
watches its conditions turn Ready while the worker applies the objects to the Kubernetes
emulator and the stand-in helm brings the release up; then takes a view kubeconfig."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, expect
from sqlalchemy import select

from app.config import Settings
from app.kube.connector import ClientConnector
from app.nodes.models import GpuClass
from app.quotas.models import TenantQuota
from app.tenants.models import Tenant
from tests.browser.conftest import demo_database, serving, signed_in_page
from tests.clusters.standin_helm import host_kubeconfig, install_standin_helm
from tests.kube.conftest import kube_emulator  # noqa: F401 - the fixture, used by name
from tests.kube.emulator import KubeEmulator

pytestmark = pytest.mark.browser


@pytest.fixture
def portal_on_emulator(
    tmp_path: Path, settings: Settings, kube_emulator: KubeEmulator,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    install_standin_helm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HELM_STANDIN_LOG", str(tmp_path / "helm.jsonl"))
    database = demo_database(tmp_path)
    with database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == "demo")).one()
        h100 = db.scalars(select(GpuClass)).one()
        db.add(TenantQuota(tenant_id=demo.id, gpu_class_id=h100.id, gpus=8))
    host = settings.model_copy(update={
        "database_url": database.url, "worker_poll_seconds": 0.2,
        "kubeconfig": str(host_kubeconfig(tmp_path / "host.kubeconfig", kube_emulator.url)),
    })
    with serving(host, database, ClientConnector(host), with_worker=True) as base:
        yield base
    database.dispose()


def test_create_a_cluster_watch_it_turn_ready_and_take_a_kubeconfig(
    browser: Browser, portal_on_emulator: str, kube_emulator: KubeEmulator,  # noqa: F811
) -> None:
    page = signed_in_page(browser, portal_on_emulator, "alice@example.com")
    page.goto(portal_on_emulator + "/t/demo/clusters")
    form = page.locator("#cluster-form")
    form.locator("input[name=name]").fill("train")
    h100 = "H100 80GB (NVIDIA-H100-80GB-HBM3)"
    form.locator("select[name=gpu_class_id]").select_option(label=h100)
    form.locator("input[name=gpus]").fill("4")
    form.get_by_role("button", name="Create cluster").click()
    page.wait_for_url(portal_on_emulator + "/t/demo/clusters/train")

    expect(page.locator("#cluster-phase")).to_have_text("Ready", timeout=30_000)
    expect(page.locator("tr[data-condition=Ready]")).to_contain_text("True")
    assert kube_emulator.stored("v1", "Namespace", "t-demo--train") is not None
    quota = kube_emulator.stored("v1", "ResourceQuota", "tenant-quota", "t-demo--train")
    assert quota is not None
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"

    panel = page.locator("#kubeconfigs")
    panel.locator("select[name=role]").select_option("view")
    panel.get_by_role("button", name="Get kubeconfig").click()
    config = yaml.safe_load(page.locator("#kubeconfig-yaml").inner_text())
    assert config["kind"] == "Config"
    assert config["users"][0]["user"]["token"]
    expect(page.locator("#kubeconfigs")).to_contain_text("view")
