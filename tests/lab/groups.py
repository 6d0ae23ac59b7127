"""The lab's modules in three groups, a lab each: a parallel run gives them to three workers,
and each lab its own network."""

from __future__ import annotations

import pytest

from app.lab.network import LabNetwork

# The three teams' walk, its faults and attacks, and the machines.
TEAMS = pytest.mark.xdist_group("lab-teams")
# The sleep and reclaim walks, the longest two.
WALKS = pytest.mark.xdist_group("lab-walks")
# The idle-GPU walk: most of it a real minute of waiting, beside the other two walks rather
# than after them (in one group the three walks were the suite's longest path).
IDLE = pytest.mark.xdist_group("lab-idle")


def lab_network(slot: int) -> LabNetwork:
    """Beside `make lab`'s plab/10.213: a suite's labs (one per worker, or another suite's)
    each on a slot of their own."""
    return LabNetwork(f"plt{slot}", f"10.{214 + slot}")
