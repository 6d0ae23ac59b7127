"""What the template tests share: a stand-in Helm repository index and the "training" template
of the issue (dedicated H100s, KAI inside, user namespaces)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fastapi.testclient import TestClient

from app.kit.config import Settings
from app.kube.errors import KubeError
from app.kube.port import Manifest
from app.reconcilers.template_validation import TemplateValidator
from app.templates.charts import ChartLookup
from tests.support.drive import run_due
from tests.support.paths import REFERENCE

TEMPLATES = "/api/v1/cluster-templates"
KAI_REPO = "https://charts.example.com/kai"
KAI_ADDON = {"name": "kai-scheduler", "repo": KAI_REPO, "chart": "kai-scheduler",
             "version": "0.9.3"}
_PORTAL = Settings(env="test")
# The pinned vCluster chart as its repository serves it: the chart's own values schema.
VCLUSTER_CHART = (_PORTAL.vcluster_chart_repo, "vcluster", _PORTAL.vcluster_chart_version)


def vcluster_values_schema(version: str = _PORTAL.vcluster_chart_version) -> dict[str, Any]:
    found = json.loads((REFERENCE / f"vcluster-{version}-values.schema.json").read_text())
    assert isinstance(found, dict)
    return found


@dataclass
class StandinCharts:
    """Plays the add-on repositories' index.yaml: the charts published there, nothing else.

    A stand-in because the test machine has no route to real Helm repositories; the resolvers
    the app uses are tested on an index.yaml served to it in-process (HelmIndexResolver) and on
    a real OCI registry (OciResolver, test_oci_charts.py).
    """

    published: set[tuple[str, str, str]] = field(
        default_factory=lambda: {(KAI_REPO, "kai-scheduler", "0.9.3"), VCLUSTER_CHART})
    asked: list[tuple[str, str, str]] = field(default_factory=list)
    schemas: dict[tuple[str, str, str], dict[str, Any]] = field(
        default_factory=lambda: {VCLUSTER_CHART: vcluster_values_schema()})

    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        self.asked.append((repo, chart, version))
        if (repo, chart, version) in self.published:
            return ChartLookup(values_schema=self.schemas.get((repo, chart, version)))
        return ChartLookup(f"{repo} has no chart {chart!r} at version {version}")


@dataclass
class StandinHost:
    """A host that answers as told: for what the real test API server cannot be made to say
    (an older Kubernetes, the user-namespace gate off, a refused object)."""

    version: str = "v1.32.13"
    keeps_host_users: bool = True
    refuse_kind: str | None = None
    applied: list[Manifest] = field(default_factory=list)
    dry_runs: list[Manifest] = field(default_factory=list)

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        self.applied.append(obj)
        return obj

    def dry_run_apply(self, obj: Manifest) -> Manifest:
        self.dry_runs.append(obj)
        if obj["kind"] == self.refuse_kind:
            raise KubeError(f"{obj['kind']} refused by admission webhook \"policy.example\"")
        if obj["kind"] == "StatefulSet" and not self.keeps_host_users:
            spec = obj["spec"]["template"]["spec"]
            return {**obj, "spec": {**obj["spec"], "template": {
                **obj["spec"]["template"],
                "spec": {k: v for k, v in spec.items() if k != "hostUsers"}}}}
        return obj

    def server_version(self) -> str:
        return self.version


def training(gpu_class_id: int, **overrides: Any) -> dict[str, Any]:
    """The issue's "training (dedicated H100, KAI inside)" template, as an admin posts it."""
    settings = {"placement": "dedicated-nodes", "kubernetes_version": "1.32.4",
                "gpu_class_id": gpu_class_id, "default_gpus": 8, "max_gpus": 16,
                "pod_security": "restricted", "user_namespaces": True, "addons": [KAI_ADDON]}
    return {"name": "training", "description": "dedicated H100, KAI inside",
            "settings": {**settings, **overrides}}


def validate_in_worker(client: TestClient, admin: dict[str, str], name: str,
                       number: int) -> dict[str, Any]:
    """What the Validate button does: queued by the web (202, pending), run by the worker's
    validator (with the app's host and charts), then read back as the admin sees it."""
    queued = client.post(f"{TEMPLATES}/{name}/versions/{number}/validate", headers=admin)
    assert queued.status_code == 202, queued.text
    assert queued.json()["validation_pending"] is True
    run_validations(client)
    shown = client.get(f"{TEMPLATES}/{name}", headers=admin).json()["versions"]
    version: dict[str, Any] = next(v for v in shown if v["version"] == number)
    assert version["validation_pending"] is False
    return version


def run_validations(client: TestClient) -> int:
    """One pass of the worker's validator, with the app's host cluster and charts."""
    state = client.app.state  # type: ignore[attr-defined]
    return run_due(TemplateValidator(state.settings, state.database, state.kube,
                                     state.chart_resolver), "test-worker")
