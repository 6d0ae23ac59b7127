"""Guaranteed and burst GPUs on the lab, decided by KAI's own programs: a tenant bursts onto
idle GPUs, their owner comes back, KAI reclaims exactly what was borrowed and no more."""

from __future__ import annotations

from app.lab import demo, reclaim
from app.lab.main import Lab
from tests.lab import groups

pytestmark = groups.WALKS


def test_kai_reclaims_borrowed_gpus_for_their_owner_and_the_borrower_keeps_its_guarantee(
        lab: Lab) -> None:
    report = reclaim.run(demo.read_env(lab.folder / "env"), lab.folder / "kubeconfigs")
    failures = "\n".join(f"{c.name}: {c.detail}" for c in report.failures())
    assert report.passed, f"the reclaim scenario failed:\n{failures}"
    names = [c.name for c in report.checks]
    for claim in ("bursts onto the idle GPUs", "guaranteed GPUs bound by reclaim",
                  "kept its guarantee throughout", "only borrowed GPUs were reclaimed",
                  "KAI says it reclaimed them", "the portal shows 6 burst GPUs",
                  "the portal shows 2 burst GPUs", "audit trail says which pods",
                  "the ledger adds up the worker's samples", "the ledger splits its GPU-hours",
                  "its guarantee comes from its own tenant's borrowed GPUs"):
        assert any(claim in name for name in names), claim
