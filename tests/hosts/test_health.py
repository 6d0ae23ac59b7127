"""Health checks against the simulated host of `portal dev` (in memory: no version endpoint)."""

from __future__ import annotations

import logging

import pytest

from app.hosts.health import run_checks
from app.hosts.models import HostCluster
from app.hosts.service import checks_of, store_health
from app.kit.config import Settings
from app.kube.connector import ClientConnector, HostTarget, probe
from app.kube.simulated import SimulatedHost
from app.templates.charts import ChartLookup


class NoCharts:
    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        return ChartLookup()


def test_the_simulated_host_is_reachable_with_kai_and_names_the_missing_webhook(
        settings: Settings) -> None:
    host = SimulatedHost([], startup_seconds=0)
    port = probe(host, HostTarget(1, "local"))
    found = {r.name: r for r in run_checks(port, settings, NoCharts())}
    assert found["api-reachable"].passed and found["kai-queue-crd"].passed
    assert not found["admission-webhook"].passed
    assert "the portal's worker registers it" in found["admission-webhook"].message
    assert found["vcluster-chart"].passed


def test_stored_credentials_the_client_cannot_use_are_a_failed_check(
        settings: Settings) -> None:
    broken = HostTarget(2, "gpu-eu-2", "users: [{name: a, user: {client-key-data: '!!!'}}]")
    found = {r.name: r for r in checks_of(broken, settings, ClientConnector(settings),
                                          NoCharts())}
    assert not found["api-reachable"].passed
    assert "cannot be built from the credentials" in found["api-reachable"].message
    assert found["kai-queue-crd"].message == "not checked: the API server is not reachable"


class OfflineCharts:
    """The chart repository out of reach, as on a laptop without internet."""

    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        return ChartLookup(problem=f"cannot reach {repo}: network is unreachable")


def test_offline_the_simulated_host_does_not_fail_the_chart_check(settings: Settings) -> None:
    """`portal dev` installs no chart: an unreachable chart repository is not its problem."""
    host = SimulatedHost([], startup_seconds=0)
    port = probe(host, HostTarget(1, "local"))
    simulated = settings.model_copy(update={"simulated_host": True})
    found = {r.name: r for r in run_checks(port, simulated, OfflineCharts())}
    assert found["vcluster-chart"].passed
    assert found["vcluster-chart"].message.startswith("not applicable")
    real = {r.name: r for r in run_checks(port, settings, OfflineCharts())}
    assert not real["vcluster-chart"].passed  # a real host still needs the chart


def test_a_check_that_starts_failing_is_logged_once(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    row = HostCluster(name="gpu-eu-2", region="eu")
    port = probe(SimulatedHost([], startup_seconds=0), HostTarget(1, "gpu-eu-2"))
    with caplog.at_level(logging.INFO, logger="app.hosts.service"):
        store_health(row, run_checks(port, settings, OfflineCharts()))
        store_health(row, run_checks(port, settings, OfflineCharts()))
        store_health(row, run_checks(port, settings, NoCharts()))
    lines = [r.getMessage() for r in caplog.records if "vcluster-chart" in r.getMessage()]
    assert lines == [
        "host cluster gpu-eu-2: check vcluster-chart failed: cannot reach "
        f"{settings.vcluster_chart_repo}: network is unreachable",
        "host cluster gpu-eu-2: check vcluster-chart passes again: vcluster "
        f"{settings.vcluster_chart_version} from {settings.vcluster_chart_repo} resolves"]
    assert [r.levelname for r in caplog.records if "vcluster-chart" in r.getMessage()] == [
        "WARNING", "INFO"]
