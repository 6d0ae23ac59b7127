"""Idle GPUs on the lab, through its Prometheus and played DCGM exporter: a busy team's
utilisation is known within two scrapes, an idle team is flagged after the window and slept by a
policy idle on utilisation (its GPUs then serve a third team), the busy one stays awake; with
Prometheus stopped the portal says "unknown", answers every page and sleeps nothing for it."""

from __future__ import annotations

from app.lab import demo, idle_walk
from app.lab.main import Lab
from tests.lab import groups

pytestmark = groups.IDLE


def test_an_idle_team_is_flagged_and_slept_by_utilisation_and_unknown_is_said_without_prometheus(
        lab: Lab) -> None:
    env = demo.read_env(lab.folder / "env")
    report = idle_walk.run(env, lab.folder / "kubeconfigs")
    if report.passed:
        idle_walk.without_prometheus(report, env, lab.folder / "portal.log", lab.telemetry)
    failures = "\n".join(f"{c.name}: {c.detail}" for c in report.failures())
    assert report.passed, f"the idle-GPU walk failed:\n{failures}"
    names = [c.name for c in report.checks]
    for claim in ("utilisation is known within two scrapes", "on the admins' idle-GPU view",
                  "not on the idle-GPU view",
                  "portal_tenant_idle_gpus in the lab's Prometheus",
                  "asleep on idle utilisation", "waiting pods bound on the GPUs",
                  "stays awake under the same policy", "the API says its utilisation is unknown",
                  "idle-GPU API says unknown", "say unknown", "stays awake while Prometheus",
                  "no request failed", "every target up"):
        assert any(claim in name for name in names), claim
