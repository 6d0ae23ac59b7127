"""Health checks against the simulated host of `portal dev` (in memory: no version endpoint)."""

from __future__ import annotations

from app.config import Settings
from app.hosts.health import run_checks
from app.kube.connector import HostTarget, probe
from app.kube.simulated import SimulatedHost


class NoCharts:
    def problem(self, repo: str, chart: str, version: str) -> str | None:
        return None


def test_the_simulated_host_is_reachable_with_kai_and_names_the_missing_webhook(
        settings: Settings) -> None:
    host = SimulatedHost([], startup_seconds=0)
    port = probe(host, HostTarget(1, "local"))
    found = {r.name: r for r in run_checks(port, settings, NoCharts())}
    assert found["api-reachable"].passed and found["kai-queue-crd"].passed
    assert not found["admission-webhook"].passed
    assert "the portal's worker registers it" in found["admission-webhook"].message
    assert found["vcluster-chart"].passed
