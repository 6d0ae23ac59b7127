"""Done when of issue 13, with portalctl only: a tenant admin signs in through the browser,
asks for quota, a platform admin approves it, the tenant admin creates a cluster with --wait
and merges a working context for it into their kubeconfig; `clusters list -o json` feeds jq.

The cluster turns Ready for real: the portal's worker runs in-process against a real host API
server (etcd + kube-apiserver, with KAI's Queue CRD) and the stand-in helm brings the release up
with the admin kubeconfig of a second real API server, the virtual cluster, as in the browser
journey of the cluster lifecycle (tests/browser/test_cluster_journey.py).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as _k8s_client
from kubernetes import config as _k8s_config
from playwright.sync_api import Browser, expect

from app.database.core import Database
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_NAME
from tests import factories
from tests.clusters.cleanup import remove_tenant_objects
from tests.clusters.standin_helm import use_standin_helm
from tests.portalctl.conftest import PORTALCTL, PortalCtl, start_browser_login
from tests.support import oidc
from tests.support.kube_server import ApiServer
from tests.support.kubeconfigs import forget_users_on_virtual
from tests.support.principals import bearer
from tests.support.serving import serving

pytestmark = [pytest.mark.browser, pytest.mark.kube_server]

# The official client has no type hints.
k8s_client: Any = _k8s_client
k8s_config: Any = _k8s_config

TENANT = "ctlj"  # the host API server is shared by the run: a slug no other test uses
TENANT_ADMIN = "tess@example.com"
RBAC = "rbac.authorization.k8s.io/v1"


@dataclass
class JourneyPortal:
    url: str
    h100_id: int
    ops_token: str


@pytest.fixture
def host(kai_host: ApiServer, settings: Settings) -> Iterator[KubernetesAdapter]:
    admin = kai_host.adapter()
    yield admin
    remove_tenant_objects(admin, TENANT)
    admin.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                 WEBHOOK_CONFIGURATION_NAME)
    admin.delete("v1", "Namespace", settings.webhook_namespace)
    admin.close()


@pytest.fixture
def portal_with_worker(
    tmp_path: Path, settings: Settings, own_pg_database: Database, oidc_issuer: str,
    host_api: ApiServer, virtual_api: ApiServer, host: KubernetesAdapter,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[JourneyPortal]:
    use_standin_helm(tmp_path / "helm", monkeypatch, virtual_api.admin_kubeconfig)
    database = own_pg_database
    with database.transaction() as db:
        host_row = factories.host_cluster(db, "local")
        host_row.is_default = True
        h100 = factories.gpu_class(db, display_name="H100 80GB")
        tenant = factories.tenant(db, TENANT)
        tess = factories.user(db, TENANT_ADMIN, issuer=oidc_issuer, subject=TENANT_ADMIN)
        factories.membership(db, tenant, tess, "admin")
        ops_token = bearer(db, factories.user(db, "ops@example.com", admin=True))
        h100_id = h100.id
    oidc.register_user(oidc_issuer, TENANT_ADMIN, name="Tess")
    kubeconfig = host_api.write_admin_kubeconfig(tmp_path / "host.kubeconfig")
    on_host = settings.model_copy(update={
        "database_url": database.url, "worker_poll_seconds": 0.2, "kubeconfig": str(kubeconfig),
    })
    with serving(on_host, database, ClientConnector(on_host), with_worker=True) as url:
        yield JourneyPortal(url, h100_id, ops_token["Authorization"][7:])
    forget_users_on_virtual(database, virtual_api)


def test_a_tenant_admin_goes_from_a_fresh_terminal_to_a_working_context(
    portal_with_worker: JourneyPortal, portalctl: PortalCtl, browser: Browser,
    virtual_api: ApiServer, tmp_path: Path,
) -> None:
    portal = portal_with_worker
    kubeconfig = portalctl.home / ".kube" / "config"
    kubeconfig.parent.mkdir(parents=True)
    kubeconfig.write_text(yaml.safe_dump(_someone_elses_kubeconfig()))
    portalctl.env["KUBECONFIG"] = str(kubeconfig)

    # Sign in: portalctl "opens the browser" through $BROWSER, which notes the link it is given.
    opened = tmp_path / "opened-url"
    browser_command = tmp_path / "browser.sh"
    browser_command.write_text(f'#!/bin/sh\nprintf %s "$1" > {opened}\n')
    browser_command.chmod(0o755)
    login = start_browser_login(portalctl, portal.url, "--timeout", "120",
                                env={"BROWSER": str(browser_command)})
    assert opened.read_text() == login.link
    page = browser.new_context().new_page()
    page.goto(login.link)
    page.locator("input[name='sub']").fill(TENANT_ADMIN)
    page.get_by_role("button", name="Authorize").click()
    page.get_by_role("button", name="Create token and sign in").click()
    expect(page.locator("#portalctl-done")).to_contain_text("portalctl is signed in")
    signed_in = login.finish()
    assert signed_in.exit_code == 0, signed_in.stderr
    config = portalctl.home / ".config" / "portalctl" / "config.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600

    # Quota: asked for by the tenant admin, approved by a platform admin.
    asked = _json(portalctl("quota", "request", "--gpu-class", str(portal.h100_id),
                            "--gpus", "4", "--reason", "fine-tuning", "-o", "json"))
    assert asked["state"] == "pending"
    assert portalctl("--profile", "ops", "login", "--url", portal.url, "--token-stdin",
                     stdin=portal.ops_token).exit_code == 0
    # The test host has no GPU nodes, so guaranteeing 4 GPUs is an overcommit to confirm.
    approved = _json(portalctl("--profile", "ops", "quota", "approve", str(asked["id"]),
                               "--overcommit", "-o", "json"))
    assert approved["state"] == "approved"

    # The cluster, waited for until the worker has made it Ready.
    created = portalctl("clusters", "create", "train", "--gpu-class", str(portal.h100_id),
                        "--gpus", "4", "--wait", "--timeout", "120", "--poll", "0.5",
                        "-o", "json")
    assert created.exit_code == 0, created.stderr
    assert _json(created)["phase"] == "Ready"
    assert "Ready=True" in created.stderr

    # A context merged into the user's kubeconfig, read by the official loader, that works.
    merged = portalctl("kubeconfig", "train", "--role", "view", "--ttl", "1h", "--merge",
                       "--use")
    assert merged.exit_code == 0, merged.stderr
    contexts, current = k8s_config.list_kube_config_contexts(config_file=str(kubeconfig))
    assert {c["name"] for c in contexts} >= {"home", current["name"]}
    assert current["name"] != "home"
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    assert configuration.host == f"https://train.{TENANT}.vc.example.com"
    # That name resolves nowhere here: the same context, its server the virtual API server's.
    pods = _pods_through(_pointed_at(kubeconfig, current["name"], virtual_api.url, tmp_path))
    assert pods.items == []

    # Scripts: the API's objects as JSON, through jq when the machine has it.
    listed = _json(portalctl("clusters", "list", "-o", "json"))
    assert [(c["name"], c["phase"]) for c in listed] == [("train", "Ready")]
    if shutil.which("jq"):
        env = {"PATH": os.environ["PATH"],
               **{k: v for k, v in portalctl.env.items() if v is not None}}
        pipe = f"{PORTALCTL} clusters list -o json | jq -r '.[].name'"
        names = subprocess.run(pipe, shell=True, env=env,  # noqa: S602 - a script's pipe
                               capture_output=True, text=True, check=True)
        assert names.stdout == "train\n"


def _pointed_at(kubeconfig: Path, context: str, server: str, directory: Path) -> Path:
    """A copy of ``kubeconfig`` whose ``context`` reaches its cluster at ``server``."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = next(c["context"]["cluster"] for c in config["contexts"] if c["name"] == context)
    for entry in config["clusters"]:
        if entry["name"] == cluster:
            entry["cluster"]["server"] = server
    copy = directory / "pointed.kubeconfig"
    copy.write_text(yaml.safe_dump(config))
    return copy


def _pods_through(kubeconfig: Path) -> Any:
    """The default namespace's pods, listed as any client of the official loader would."""
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with k8s_client.ApiClient(configuration) as api:
        return k8s_client.CoreV1Api(api).list_namespaced_pod("default")


def _someone_elses_kubeconfig() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "home",
        "clusters": [{"name": "home", "cluster": {"server": "https://home.example.com:6443"}}],
        "users": [{"name": "me", "user": {"token": "home-token"}}],
        "contexts": [{"name": "home", "context": {"cluster": "home", "user": "me"}}],
    }


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)
