"""Done when of the cluster lifecycle, in a real browser: a tenant admin creates a cluster and
watches its conditions turn Ready while the worker applies the objects to a real host API server
(etcd + kube-apiserver 1.32 + controller-manager, with KAI's Queue CRD) and the stand-in helm
brings the release up with the admin kubeconfig of a second real API server (the virtual
cluster); then takes a view kubeconfig, issued on that virtual cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, expect
from sqlalchemy import select

from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_NAME
from app.quotas.models import TenantQuota
from app.tenants.models import Tenant
from tests.browser.conftest import demo_database, signed_in_page
from tests.clusters.cleanup import remove_tenant_objects
from tests.clusters.standin_helm import use_standin_helm
from tests.support.kube_server import ApiServer
from tests.support.kubeconfigs import Kubeconfig, account_username, forget_users_on_virtual
from tests.support.serving import serving

pytestmark = [pytest.mark.browser, pytest.mark.kube_server]

NAMESPACE = "t-demo--train"
RBAC = "rbac.authorization.k8s.io/v1"


@pytest.fixture
def host(kai_host: ApiServer, settings: Settings) -> Iterator[KubernetesAdapter]:
    """The real host with KAI's Queue CRD. The demo tenant's slug is fixed, and the worker also
    registers the portal's admission webhook: all of it is removed after, as the host is
    shared by the run."""
    admin = kai_host.adapter()
    yield admin
    remove_tenant_objects(admin, "demo")
    admin.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                 WEBHOOK_CONFIGURATION_NAME)
    admin.delete("v1", "Namespace", settings.webhook_namespace)
    admin.close()


@pytest.fixture
def portal_on_real_host(
    tmp_path: Path, settings: Settings, host_api: ApiServer, virtual_api: ApiServer,
    host: KubernetesAdapter, monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    use_standin_helm(tmp_path / "helm", monkeypatch, virtual_api.admin_kubeconfig)
    database = demo_database(tmp_path)
    with database.transaction() as db:
        demo = db.scalars(select(Tenant).where(Tenant.slug == "demo")).one()
        h100 = db.scalars(select(GpuClass)).one()
        # quota is per region: the demo host's
        db.add(TenantQuota(tenant_id=demo.id, gpu_class_id=h100.id, gpus=8, region="dev"))
    kubeconfig = host_api.write_admin_kubeconfig(tmp_path / "host.kubeconfig")
    on_host = settings.model_copy(update={
        "database_url": database.url, "worker_poll_seconds": 0.2, "kubeconfig": str(kubeconfig),
    })
    with serving(on_host, database, ClientConnector(on_host), with_worker=True) as base:
        yield base
    # The demo users' ids are the SQLite file's own: what was granted to them on the shared
    # virtual cluster goes, so that no later test's user of the same id finds it.
    forget_users_on_virtual(database, virtual_api)
    database.dispose()


def test_create_a_cluster_watch_it_turn_ready_and_take_a_kubeconfig(
    browser: Browser, portal_on_real_host: str, host: KubernetesAdapter,
    virtual_api: ApiServer,
) -> None:
    page = signed_in_page(browser, portal_on_real_host, "alice@example.com")
    page.goto(portal_on_real_host + "/t/demo/clusters")
    form = page.locator("#cluster-form")
    form.locator("input[name=name]").fill("train")
    h100 = "H100 80GB (NVIDIA-H100-80GB-HBM3): 8 of 8 GPUs left"
    form.locator("select[name=gpu_class_id]").select_option(label=h100)
    form.locator("input[name=gpus]").fill("4")
    form.get_by_role("button", name="Create cluster").click()
    page.wait_for_url(portal_on_real_host + "/t/demo/clusters/train")

    expect(page.locator("#cluster-phase")).to_have_text("Ready", timeout=60_000)
    expect(page.locator("tr[data-condition=Ready]")).to_contain_text("True")
    assert host.get("v1", "Namespace", NAMESPACE) is not None
    quota = host.get("v1", "ResourceQuota", "tenant-quota", NAMESPACE)
    assert quota is not None
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    assert host.get("v1", "Secret", "vc-train", NAMESPACE) is not None

    panel = page.locator("#kubeconfigs")
    panel.locator("select[name=role]").select_option("view")
    panel.get_by_role("button", name="Get kubeconfig").click()
    text = page.locator("#kubeconfig-yaml").inner_text()
    config = yaml.safe_load(text)
    assert config["kind"] == "Config"
    assert config["clusters"][0]["cluster"]["server"] == "https://train.demo.vc.example.com"
    # its token is the virtual API server's own, for a view ServiceAccount of alice's
    issued = Kubeconfig.parse(text)
    on_virtual = Kubeconfig(virtual_api.url, issued.token, issued.context)
    username = on_virtual.who_am_i()
    assert username.startswith(account_username("user-")) and username.endswith("-view")
    assert on_virtual.may("list", "pods") and not on_virtual.may("create", "pods")
    expect(page.locator("#kubeconfigs")).to_contain_text("view")
