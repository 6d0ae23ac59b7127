"""Health checks against the simulated host of `portal dev` (in memory: no version endpoint)."""

from __future__ import annotations

from app.hosts.health import run_checks
from app.hosts.service import checks_of
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
