"""Validation before offering: what each check refuses, with the reasons an admin reads."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.kit.config import Settings
from app.templates.charts import ChartSources
from app.templates.schemas import VersionSettings
from app.templates.validation import HelmIndexResolver, outside_allowlist, validate
from tests.support.charts import charts_dir, served
from tests.support.tenancy import Tenancy, headers
from tests.templates.registry import KAI_SCHEMA, chart_archive
from tests.templates.support import (
    KAI_ADDON,
    KAI_REPO,
    VCLUSTER_CHART,
    StandinCharts,
    StandinHost,
    training,
    validate_in_worker,
)

TEMPLATES = "/api/v1/cluster-templates"
H100 = "NVIDIA-H100-80GB-HBM3"


def settings(**overrides: Any) -> VersionSettings:
    values: dict[str, Any] = {**training(1)["settings"], "gpu_class_id": None, **overrides}
    return VersionSettings.model_validate(values)


def reasons(result: dict[str, Any]) -> dict[str, list[str]]:
    return {c["name"]: c["reasons"] for c in result["checks"] if not c["passed"]}


def test_a_broken_template_fails_with_reasons_and_cannot_be_offered(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    admin = headers(db, tenancy.platform_admin)
    broken = training(tenancy.h100.id, kubernetes_version="1.99.0",
                      addons=[{**KAI_ADDON, "version": "0.0.1"}])
    assert host_client.post(TEMPLATES, json=broken, headers=admin).status_code == 201
    validated = validate_in_worker(host_client, admin, "training", 1)
    assert validated["validation"]["passed"] is False
    failed = reasons(validated["validation"])
    assert set(failed) == {"render", "addons"}
    assert "Kubernetes 1.99.0 is not one the operator offers" in failed["render"][0]
    assert failed["addons"] == [
        f"add-on kai-scheduler: {KAI_REPO} has no chart 'kai-scheduler' at version 0.0.1"]

    refused = host_client.post(f"{TEMPLATES}/training/versions/1/offer", headers=admin)
    assert refused.status_code == 409
    problem = refused.json()
    assert {e["field"] for e in problem["errors"]} == {"render", "addons"}
    assert host_client.get(f"{TEMPLATES}/training", headers=admin).json()[
        "versions"][0]["state"] == "draft"
    assert host_client.get(f"{TEMPLATES}/training",
                           headers=headers(db, tenancy.acme_admin)).status_code == 404


def test_a_version_never_validated_cannot_be_offered(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    admin = headers(db, tenancy.platform_admin)
    app_client.post(TEMPLATES, json=training(tenancy.h100.id), headers=admin)
    refused = app_client.post(f"{TEMPLATES}/training/versions/1/offer", headers=admin)
    assert refused.status_code == 409
    assert refused.json()["errors"] == [
        {"field": "validation", "message": "the version has not been validated"}]


def test_without_a_host_cluster_the_host_checks_fail(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    admin = headers(db, tenancy.platform_admin)
    app_client.post(TEMPLATES, json=training(tenancy.h100.id), headers=admin)
    result = validate_in_worker(app_client, admin, "training", 1)
    failed = reasons(result["validation"])
    assert set(failed) == {"host-dry-run", "host-support"}
    assert "no host cluster is configured" in failed["host-dry-run"][0]


def test_user_namespaces_need_a_host_that_supports_them() -> None:
    portal, charts = Settings(env="test"), StandinCharts()
    old = validate(settings(), H100, portal, {"default": StandinHost(version="v1.29.8")}, charts)
    assert reasons(old) == {"host-support": [
        "user namespaces need Kubernetes 1.30 or later; the host runs v1.29.8"]}
    gate_off = validate(settings(), H100, portal,
                        {"default": StandinHost(keeps_host_users=False)}, charts)
    assert reasons(gate_off) == {"host-support": [
        "the host runs v1.32.13, where user namespaces need the UserNamespacesSupport "
        "feature gate, and it is off"]}
    new = StandinHost(version="v1.33.2", keeps_host_users=False)
    assert validate(settings(), H100, portal, {"default": new}, charts)["passed"] is True
    assert validate(settings(user_namespaces=False), H100, portal,
                    {"default": StandinHost(version="v1.29.8")}, charts)["passed"] is True


def test_a_host_object_the_host_refuses_fails_the_dry_run() -> None:
    host = StandinHost(refuse_kind="ResourceQuota")
    result = validate(settings(), H100, Settings(env="test"), {"default": host}, StandinCharts())
    assert reasons(result) == {"host-dry-run": [
        "ResourceQuota tenant-quota: ResourceQuota refused by admission webhook "
        '"policy.example"']}
    # The namespace the dry-runs go in is the one real write.
    assert [obj["kind"] for obj in host.applied] == ["Namespace"]


def test_every_host_is_checked_and_each_reason_names_its_host() -> None:
    refusing, fine = StandinHost(refuse_kind="ResourceQuota"), StandinHost()
    result = validate(settings(), H100, Settings(env="test"),
                      {"gpu-us-1": refusing, "gpu-eu-1": fine}, StandinCharts())
    assert reasons(result) == {"host-dry-run": [
        "gpu-us-1: ResourceQuota tenant-quota: ResourceQuota refused by admission webhook "
        '"policy.example"']}
    assert fine.dry_runs and refusing.dry_runs


def test_a_chart_version_its_repository_lacks_fails_the_schema_check() -> None:
    portal = Settings(env="test", vcluster_chart_version="0.99.0")
    result = validate(settings(), H100, portal, {"default": StandinHost()}, StandinCharts())
    assert reasons(result) == {"chart-schema": [
        "vCluster chart 0.99.0 from https://charts.loft.sh: https://charts.loft.sh has no "
        "chart 'vcluster' at version 0.99.0"]}


def test_values_the_chart_schema_refuses_fail_with_the_path_and_reason() -> None:
    charts = StandinCharts()
    schema = charts.schemas[VCLUSTER_CHART]
    # a chart whose schema no longer has the key the portal sets the pod security level with
    policies = schema["$defs"]["Policies"]
    kept = {k: v for k, v in policies["properties"].items() if k != "podSecurityStandard"}
    charts.schemas[VCLUSTER_CHART] = {**schema, "$defs": {
        **schema["$defs"], "Policies": {**policies, "properties": kept}}}
    result = validate(settings(), H100, Settings(env="test"), {"default": StandinHost()}, charts)
    failed = reasons(result)["chart-schema"]
    assert failed and all("policies: Additional properties are not allowed "
                          "('podSecurityStandard' was unexpected)" in r for r in failed)


def test_open_settings_are_rendered_for_every_choice_a_tenant_has() -> None:
    host = StandinHost()
    open_everything = settings(placement=None, kubernetes_version=None, user_namespaces=False)
    assert validate(open_everything, None, Settings(env="test"), {"default": host},
                    StandinCharts())["passed"] is True
    placements = {o["metadata"]["labels"]["gpu-tenant-portal/placement"]
                  for o in host.dry_runs if o["kind"] == "Namespace"}
    assert placements == {"shared-pool", "dedicated-nodes", "private-nodes"}
    # Every namespaced object went into the check namespace, never a tenant's.
    assert {o["metadata"].get("namespace") for o in host.dry_runs} == {
        None, "gtp-template-check"}
    assert [obj["kind"] for obj in host.applied] == ["Namespace"]


def test_keys_outside_the_allowlist_are_named() -> None:
    values = {"controlPlane": {"distro": {"k8s": {"enabled": True}}},
              "plugins": {"hooks": {"image": "x"}}, "exportKubeConfig": {"server": "https://a"}}
    assert outside_allowlist(values) == ["plugins.hooks.image"]


def _serving(index: str, status: int = 200) -> HelmIndexResolver:
    return HelmIndexResolver(get=lambda url: httpx.Response(
        status, text=index, request=httpx.Request("GET", url)))


def test_the_helm_index_resolver_reads_a_repositorys_index() -> None:
    index = ("apiVersion: v1\nentries:\n  kai-scheduler:\n  - version: 0.9.3\n"
             "  - version: 0.9.2\n")
    assert _serving(index).lookup(KAI_REPO, "kai-scheduler", "0.9.3").problem is None
    assert _serving(index).lookup(KAI_REPO, "kai-scheduler", "1.0.0").problem == (
        f"{KAI_REPO} has chart 'kai-scheduler' but not version 1.0.0")
    assert _serving(index).lookup(KAI_REPO, "gpu-operator", "1.0.0").problem == (
        f"{KAI_REPO} has no chart 'gpu-operator'")
    missing = _serving("not found", 404).lookup(KAI_REPO, "kai-scheduler", "0.9.3").problem
    assert missing is not None and missing.startswith(f"could not read {KAI_REPO}/index.yaml")


def test_the_helm_index_resolver_reads_the_schema_from_the_chart_archive() -> None:
    archive = chart_archive("kai-scheduler", "0.9.3", values={"scheduler": {"replicas": 1}},
                            schema=KAI_SCHEMA)
    index = ("apiVersion: v1\nentries:\n  kai-scheduler:\n  - version: 0.9.3\n"
             "    urls: [charts/kai-scheduler-0.9.3.tgz]\n")
    asked: list[str] = []

    def get(url: str) -> httpx.Response:
        asked.append(url)
        body = {"content": archive} if url.endswith(".tgz") else {"text": index}
        return httpx.Response(200, request=httpx.Request("GET", url), **body)

    found = HelmIndexResolver(get=get).lookup(KAI_REPO, "kai-scheduler", "0.9.3")
    assert found.problem is None and found.values_schema == KAI_SCHEMA
    assert found.default_values == {"scheduler": {"replicas": 1}}
    assert asked == [f"{KAI_REPO}/index.yaml", f"{KAI_REPO}/charts/kai-scheduler-0.9.3.tgz"]


def test_the_pinned_vcluster_chart_from_its_repository_accepts_the_values() -> None:
    """The real chart (packaged from the vCluster module by `make tools`), read from a Helm
    repository as the worker reads it: its own schema, and the values of every placement pass."""
    version = Settings(env="test").vcluster_chart_version
    with served(charts_dir("vcluster", version)) as repo:
        portal = Settings(env="test", vcluster_chart_repo=repo)
        charts = ChartSources(index=HelmIndexResolver())
        open_placement = settings(addons=[], placement=None)
        result = validate(open_placement, H100, portal, {"default": StandinHost()}, charts)
        schema = charts.lookup(repo, "vcluster", version).values_schema
    assert reasons(result) == {}
    assert schema is not None and "Policies" in schema["$defs"]
