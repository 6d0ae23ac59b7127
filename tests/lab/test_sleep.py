"""Sleep and wake on the lab: a sleeping cluster's GPUs are bound to another tenant's pods by
KAI; ``portalctl kubeconfig --wait`` wakes it with its objects, and its pods run again."""

from __future__ import annotations

from app.lab import demo, sleeping
from app.lab.main import Lab
from tests.lab import groups

pytestmark = groups.WALKS


def test_a_sleeping_clusters_gpus_serve_others_and_it_wakes_with_everything_it_held(
        lab: Lab) -> None:
    report = sleeping.run(demo.read_env(lab.folder / "env"), lab.folder / "kubeconfigs")
    failures = "\n".join(f"{c.name}: {c.detail}" for c in report.failures())
    assert report.passed, f"the sleep walk failed:\n{failures}"
    names = [c.name for c in report.checks]
    for claim in ("asleep on idle", "GPUs are bound to its pods",
                  "portalctl kubeconfig woke it", "ConfigMap and Deployment are still there",
                  "its pods run again", "its deletion is announced",
                  "deleted with its namespace, its kubeconfigs revoked"):
        assert any(claim in name for name in names), claim
