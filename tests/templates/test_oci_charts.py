"""Add-on charts on OCI registries (KAI Scheduler publishes on ghcr.io): validation resolves the
pinned version on a real registry (CNCF distribution, with the anonymous bearer-token dance),
and checks the add-on's settings against the chart's values.schema.json; helm is given the
``oci://`` reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.clusters.shapes import ClusterAddon
from app.kit.config import Settings
from app.kube.helm import HelmInstaller
from app.templates.charts import ChartSources, OciResolver
from app.templates.schemas import AddonSpec, VersionSettings
from app.templates.validation import validate
from tests.support.web import free_port
from tests.templates import registry as oci
from tests.templates.registry import KAI_PATH, KAI_SCHEMA
from tests.templates.support import StandinCharts, StandinHost, training

H100 = "NVIDIA-H100-80GB-HBM3"


def resolver(registry: oci.Registry) -> ChartSources:
    """The app's resolver on this registry; index.yaml repositories (the vCluster chart's) are
    the stand-in."""
    return ChartSources(index=StandinCharts(),
                        oci=OciResolver(plain_http=frozenset({registry.address})))


def kai(registry: oci.Registry, **changes: Any) -> dict[str, Any]:
    return {"name": "kai-scheduler", "repo": registry.repo(), "chart": "kai-scheduler",
            "version": "0.9.3", **changes}


def check(registry: oci.Registry, *addons: dict[str, Any]) -> dict[str, list[str]]:
    """The failed checks' reasons of a training template with these add-ons."""
    settings = VersionSettings.model_validate(
        {**training(1)["settings"], "gpu_class_id": None, "addons": list(addons)})
    result = validate(settings, H100, Settings(env="test"), {"default": StandinHost()},
                      resolver(registry))
    return {c["name"]: c["reasons"] for c in result["checks"] if not c["passed"]}


def test_the_pinned_version_resolves_on_the_registry_after_the_token_dance(
        registry: oci.Registry) -> None:
    before = len(registry.issuer.issued)
    found = resolver(registry).lookup(registry.repo(), "kai-scheduler", "0.9.3")
    assert found.problem is None
    assert found.values_schema == KAI_SCHEMA
    assert found.default_values == {"scheduler": {"replicas": 1}}
    # The registry refused the anonymous call; the resolver got a pull token and retried.
    assert registry.issuer.issued[before:] == [f"repository:{KAI_PATH}/kai-scheduler:pull"]
    # Build metadata is stored as "_" in the tag, as helm push does.
    assert resolver(registry).lookup(registry.repo("obs"), "agent",
                                     "1.4.0+build.7").problem is None
    assert check(registry, kai(registry, settings={"scheduler.replicas": 2})) == {}


def test_an_unknown_version_fails_validation_naming_the_chart_and_version(
        registry: oci.Registry) -> None:
    reference = f"{registry.repo()}/kai-scheduler"
    assert check(registry, kai(registry, version="0.9.4")) == {"addons": [
        f"add-on kai-scheduler: {reference} has no version 0.9.4"]}
    assert check(registry, kai(registry, chart="kai-operator")) == {"addons": [
        f"add-on kai-scheduler: {registry.repo()}/kai-operator: the registry has no such "
        "chart"]}


def test_an_unreachable_registry_is_a_clear_failed_check() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    gone = oci.Registry(address, oci.TokenIssuer())
    failed = check(gone, kai(gone))
    assert list(failed) == ["addons"] and len(failed["addons"]) == 1
    assert failed["addons"][0].startswith(
        f"add-on kai-scheduler: could not reach the registry {address} for "
        f"oci://{address}/{KAI_PATH}/kai-scheduler: ")


def test_settings_the_charts_values_schema_refuses_fail_with_path_and_reason(
        registry: oci.Registry) -> None:
    failed = check(registry, kai(registry, settings={
        "scheduler.replicas": 0, "scheduler.placementStrategy": "random"}))
    assert failed == {"addons": [
        "add-on kai-scheduler: setting scheduler.placementStrategy: 'random' is not one of "
        "['binpack', 'spread'] (values.schema.json of kai-scheduler 0.9.3)",
        "add-on kai-scheduler: setting scheduler.replicas: 0 is less than the minimum of 1 "
        "(values.schema.json of kai-scheduler 0.9.3)"]}
    # The chart's own defaults count, as Helm merges them: required replicas is there.
    assert check(registry, kai(registry, settings={"scheduler.placementStrategy": "spread"})) \
        == {}


def test_a_chart_without_a_schema_takes_any_settings(registry: oci.Registry) -> None:
    agent = {"name": "monitoring", "repo": registry.repo("obs"), "chart": "agent",
             "version": "1.4.0+build.7", "settings": {"anything.goes": "yes"}}
    assert check(registry, agent) == {}


def test_helm_installs_an_oci_chart_by_its_reference_without_repo(tmp_path: Path) -> None:
    helm = HelmInstaller(binary="helm", chart_repo="https://charts.loft.sh",
                         chart_version="0.30.0", kubeconfig=None)
    addon = ClusterAddon(name="kai-scheduler", repo="oci://ghcr.io/nvidia/kai-scheduler",
                         chart="kai-scheduler", version="v0.9.3")
    command = helm.addon_install_command(addon, "values.yaml", "kubeconfig")
    assert command[:6] == ["helm", "upgrade", "--install", "kai-scheduler",
                           "oci://ghcr.io/nvidia/kai-scheduler/kai-scheduler", "--version"]
    assert "--repo" not in command and command[6] == "v0.9.3"


def test_an_oci_repo_is_accepted_and_other_schemes_are_refused() -> None:
    spec = AddonSpec.model_validate({"name": "kai-scheduler", "chart": "kai-scheduler",
                                     "repo": "oci://ghcr.io/nvidia/kai-scheduler/",
                                     "version": "v0.9.3"})
    assert spec.repo == "oci://ghcr.io/nvidia/kai-scheduler"
    with pytest.raises(ValueError, match="https:// or oci://"):
        AddonSpec.model_validate({"name": "kai", "chart": "kai", "version": "1.0.0",
                                  "repo": "http://charts.example.com"})
