"""Less than a GPU on the lab, decided by KAI's own programs: a team granted 3 x 1g.10gb runs
three notebooks on MIG slices while the fourth waits with its reason; a team granted 0.5 of an
H100 runs two 0.25 pods on one GPU, bound by KAI's binder (the lab playing the reservation pod's
report), while a 0.75 pod is refused and a third 0.25 waits with KAI's limit; the ledger's
slice-hours and fractional GPU-hours follow what was bound.

Not yet run: written beside the quota, cluster and usage API of slices and shares (issue 61's
other parts); it runs once they are merged.
"""

from __future__ import annotations

from app.lab import demo, slices
from app.lab.main import Lab
from tests.lab import groups

pytestmark = groups.IDLE


def test_slices_and_shares_run_within_their_grant_and_the_ledger_counts_them(
        lab: Lab) -> None:
    report = slices.run(demo.read_env(lab.folder / "env"), lab.folder / "kubeconfigs")
    failures = "\n".join(f"{c.name}: {c.detail}" for c in report.failures())
    assert report.passed, f"the slices walk failed:\n{failures}"
    names = [c.name for c in report.checks]
    for claim in ("whole GPUs of a MIG-only class are refused",
                  "the host quota caps 3 x 1g.10gb", "KAI's queue holds 0.5",
                  "3 notebooks bound by KAI on MIG slices", "the 4th notebook waits",
                  "another profile is refused in words",
                  "two 0.25 pods bound by KAI's binder on one GPU",
                  "each pod got a fraction", "a pod asking 0.75 waits",
                  "a third 0.25 waits on the host with KAI's limit",
                  "keep their GPU group and reservation",
                  "slice-hours follow the slices bound", "GPU-hours are the fractions bound",
                  "the CSV's last columns say the units"):
        assert any(claim in name for name in names), claim
