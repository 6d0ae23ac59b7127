"""The suggestion benchmark's code on a tiny fleet, so that it cannot rot."""

from __future__ import annotations

from bench import node_suggestions


def test_the_benchmark_runs_on_a_tiny_fleet() -> None:
    first_fit, portal = node_suggestions.run(nodes=200, tenants=20, seed=3)
    assert (first_fit.name, portal.name) == ("first-fit", "portal")
    assert len(portal.seconds) == 20 and portal.unmet == first_fit.unmet
    assert statistics_mean(portal.racks_per_assignment) <= statistics_mean(
        first_fit.racks_per_assignment)
    assert "ms" in portal.line()
    assert node_suggestions.service_seconds(nodes=50, calls=2) > 0


def statistics_mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0
