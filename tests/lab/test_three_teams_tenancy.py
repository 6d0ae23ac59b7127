"""Isolation proven by attack: after the three-teams walk, acme (shared pool) with each role
the portal issues and initech's dedicated cluster try every way past their own nodes, queue and
namespace, and the host is read for anything that landed where it must not (app/lab/attacks.py).
The walk itself checks that shared-pool clusters list no dedicated node and that every cluster's
own kube-system pods (CoreDNS) run."""

from __future__ import annotations

import pytest

from app.lab import attacks, demo, walk
from app.lab.main import Lab
from tests.lab import groups

pytestmark = groups.TEAMS


@pytest.fixture(scope="module")
def battery(lab: Lab, walked: walk.Report) -> walk.Report:
    return attacks.run(demo.read_env(lab.folder / "env"), lab.folder / "kubeconfigs")


def _named(report: walk.Report, claim: str) -> list[walk.Check]:
    return [c for c in report.checks if claim in c.name]


def test_every_clusters_own_system_pods_run_and_shared_pools_list_no_dedicated_node(
        walked: walk.Report) -> None:
    system = _named(walked, "every kube-system pod Running")
    assert len(system) == len(demo.TEAMS), [c.name for c in walked.checks]
    lists = _named(walked, "lists no dedicated node")
    assert len(lists) == sum(t.placement == "shared-pool" for t in demo.TEAMS)
    failed = [f"{c.name}: {c.detail}" for c in system + lists if not c.passed]
    assert not failed, "\n".join(failed)


def test_no_attack_of_one_tenant_lands_anywhere_it_must_not(battery: walk.Report) -> None:
    failed = "\n".join(f"{c.name}: {c.detail}" for c in battery.failures())
    assert battery.passed, f"the battery found:\n{failed}"
    for claim in ("lists no node dedicated", "every pod it placed is on a node it may use",
                  "every pod is KAI's", "no pod with host access",
                  "no NodePort or LoadBalancer", "no Endpoints or EndpointSlice",
                  "reads none of"):
        assert _named(battery, claim), claim
