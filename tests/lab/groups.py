"""The lab's modules in two groups, a lab each: a parallel run gives them to two workers, and
each lab its own network."""

from __future__ import annotations

import pytest

from app.lab.network import LabNetwork

# The three teams' walk, its faults and attacks, and the machines.
TEAMS = pytest.mark.xdist_group("lab-teams")
# The sleep and reclaim walks, the longest two.
WALKS = pytest.mark.xdist_group("lab-walks")


def lab_network(slot: int) -> LabNetwork:
    """Beside `make lab`'s plab/10.213: a suite's labs (one per worker, or another suite's)
    each on a slot of their own."""
    return LabNetwork(f"plt{slot}", f"10.{214 + slot}")
