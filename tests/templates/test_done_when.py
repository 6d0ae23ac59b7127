"""Issue 16, done when: an admin creates "training (dedicated H100, KAI inside)" with KAI's chart
from an OCI registry and add-on settings; validation passes in the worker; it is offered. A
tenant creates a cluster from it choosing only name and size, and sees AddonReady/kai-scheduler
turn True; the team queues exist inside the virtual cluster. A broken version cannot be offered.

Real parts: PostgreSQL; the host API server (kube-apiserver 1.32, KAI's Queue CRD) for the
validation's dry-runs and the cluster's objects; a second API server as the virtual cluster,
with KAI's real Queue CRD installed as KAI's chart would; an OCI registry (CNCF distribution,
token auth) holding the chart. helm is the stand-in (tests/clusters/standin_helm.py), run by the
real HelmInstaller.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.database.core import Database
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import labels as lbl
from app.kube.manifests.team_queues import team_label
from app.reconcilers.clusters import ClusterReconciler
from app.templates.charts import ChartSources, OciResolver
from app.tenants.models import GroupMapping
from tests.clusters.cleanup import remove_tenant_objects
from tests.clusters.standin_helm import helm_calls, use_standin_helm
from tests.clusters.support import Clock
from tests.support.drive import run_due
from tests.support.kube_server import ApiServer, install_crds
from tests.support.paths import KAI_QUEUE_CRD
from tests.support.tenancy import Tenancy, headers
from tests.support.web import HTML
from tests.templates import registry as oci
from tests.templates.support import StandinCharts, run_validations, training

TEMPLATES = "/api/v1/cluster-templates"
CLUSTERS = "/api/v1/tenants/acme/clusters"
KAI_READY = cond.addon_type("kai-scheduler")


@pytest.fixture
def kai_inside(virtual: KubernetesAdapter, host_admin: KubernetesAdapter) -> Iterator[None]:
    install_crds(virtual, KAI_QUEUE_CRD)
    yield
    remove_tenant_objects(host_admin, "acme")
    for queue in sorted(virtual.list(lbl.KAI_API_VERSION, "Queue", label_selector=lbl.managed()),
                        key=lambda q: "parentQueue" not in q["spec"]):
        virtual.delete(lbl.KAI_API_VERSION, "Queue", queue["metadata"]["name"])


@pytest.fixture
def worker_settings(settings: Settings, kai_host: ApiServer, tmp_path: Path) -> Settings:
    kubeconfig = kai_host.write_admin_kubeconfig(tmp_path / "host.kubeconfig")
    return settings.model_copy(update={"kubeconfig": str(kubeconfig)})


def kai_addon(registry: oci.Registry, **changes: Any) -> dict[str, Any]:
    return {"name": "kai-scheduler", "repo": registry.repo(), "chart": "kai-scheduler",
            "version": "0.9.3", "settings": {"scheduler.replicas": 2,
                                             "scheduler.placementStrategy": "binpack"},
            **changes}


def test_training_with_kai_inside_from_template_to_team_queues(
        host_client: TestClient, db: Session, database: Database, tenancy: Tenancy,
        registry: oci.Registry, worker_settings: Settings, virtual: KubernetesAdapter,
        virtual_api: ApiServer, kai_inside: None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    host_client.app.state.chart_resolver = ChartSources(  # type: ignore[attr-defined]
        index=StandinCharts(), oci=OciResolver(plain_http=frozenset({registry.address})))
    admin = headers(db, tenancy.platform_admin)

    # The admin makes it; the web queues the validation, the worker runs it.
    created = host_client.post(TEMPLATES, json=training(
        tenancy.h100.id, addons=[kai_addon(registry)]), headers=admin)
    assert created.status_code == 201, created.text
    assert host_client.post(f"{TEMPLATES}/training/versions/1/validate",
                            headers=admin).status_code == 202
    assert run_validations(host_client) == 1
    version = host_client.get(f"{TEMPLATES}/training", headers=admin).json()["versions"][0]
    assert version["validation"]["passed"] is True, version["validation"]
    assert {c["name"] for c in version["validation"]["checks"]} >= {
        "host-dry-run", "host-support", "addons"}
    offered = host_client.post(f"{TEMPLATES}/training/versions/1/offer", headers=admin)
    assert offered.status_code == 200, offered.text

    # A broken version (a chart version the registry lacks, a setting its schema refuses)
    # cannot be offered, and says why.
    broken = host_client.post(f"{TEMPLATES}/training/versions", headers=admin, json={
        "addons": [kai_addon(registry, version="0.9.4"),
                   kai_addon(registry, name="kai-second", settings={"scheduler.replicas": 0})]})
    assert broken.status_code == 201, broken.text
    host_client.post(f"{TEMPLATES}/training/versions/2/validate", headers=admin)
    run_validations(host_client)
    refused = host_client.post(f"{TEMPLATES}/training/versions/2/offer", headers=admin)
    assert refused.status_code == 409
    assert refused.json()["errors"] == [
        {"field": "addons", "message": f"add-on kai-scheduler: {registry.repo()}/kai-scheduler "
                                       "has no version 0.9.4"},
        {"field": "addons", "message": "add-on kai-second: setting scheduler.replicas: 0 is "
                                       "less than the minimum of 1 (values.schema.json of "
                                       "kai-scheduler 0.9.3)"}]

    # The tenant: two teams mapped from the IdP; the cluster needs only a name and a size.
    for group in ("ml-research", "Vision_Team"):
        db.add(GroupMapping(tenant_id=tenancy.acme.id, group_name=group, role="member"))
    db.commit()
    tenant = headers(db, tenancy.acme_admin)
    made = host_client.post(CLUSTERS, headers=tenant,
                            json={"name": "kai-train", "template": "training", "gpus": 8})
    assert made.status_code == 201, made.text
    assert made.json()["placement"] == "dedicated-nodes"

    # The worker: real host, stand-in helm, the virtual cluster a real API server.
    log = use_standin_helm(tmp_path / "helm", monkeypatch, virtual_api.admin_kubeconfig)
    clock = Clock()
    reconciler = ClusterReconciler(worker_settings, database, ClientConnector(worker_settings),
                                   clock=clock, wait_seconds=0.5)
    conditions: list[dict[str, Any]] = []
    for _ in range(8):
        clock.advance(301)
        run_due(reconciler, "worker-1")
        conditions = host_client.get(f"{CLUSTERS}/kai-train", headers=tenant).json()[
            "conditions"]
        if cond.is_true(conditions, cond.TEAM_QUEUES):
            break
    assert cond.is_true(conditions, cond.READY), conditions
    assert cond.is_true(conditions, KAI_READY), conditions
    page = host_client.get("/t/acme/clusters/kai-train", headers={**tenant, **HTML})
    assert f'data-condition="{KAI_READY}"' in page.text

    calls: list[dict[str, Any]] = helm_calls(log)
    addon_runs = [c for c in calls if "kai-scheduler" in c["argv"]]
    assert addon_runs and addon_runs[0]["argv"][:5] == [
        "upgrade", "--install", "kai-scheduler", f"{registry.repo()}/kai-scheduler",
        "--version"]
    assert "--repo" not in addon_runs[0]["argv"]
    values = str(addon_runs[0]["values"])
    assert "replicas: 2" in values and "binpack" in values and "acme" not in values

    queues = {q["metadata"]["name"]: q["spec"] for q in virtual.list(
        lbl.KAI_API_VERSION, "Queue", label_selector=lbl.managed())}
    vision = f"kai-train-{team_label('Vision_Team')}"
    assert set(queues) == {"kai-train", "kai-train-ml-research", vision}
    assert queues["kai-train"]["resources"]["gpu"]["quota"] == 8
    assert [queues[n]["resources"]["gpu"]["quota"] for n in (vision, "kai-train-ml-research")
            ] == [4, 4]
