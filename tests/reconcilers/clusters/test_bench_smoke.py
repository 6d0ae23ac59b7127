"""The convergence benchmark still runs, on a tiny input (figures, not timings, are checked)."""

from __future__ import annotations

from bench import cluster_convergence


def test_the_benchmark_runs_and_the_reconciler_is_quiet_on_resync() -> None:
    results = cluster_convergence.run(clusters=4, tenants=2)
    naive_converge, naive_resync = results["naive apply-everything"]
    converge, resync = results["portal reconciler"]
    _, get_resync = results["reconciler, GET per object"]
    assert converge.helm_runs == naive_converge.helm_runs == 4
    assert converge.mutations == naive_converge.mutations  # both make the same objects
    assert (resync.writes, resync.mutations, resync.helm_runs) == (0, 0, 0)
    assert naive_resync.helm_runs == 4 and resync.calls < naive_resync.calls
    assert get_resync.writes == 0 and resync.calls < get_resync.calls
