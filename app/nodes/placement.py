"""Which free nodes to dedicate to a tenant: pure functions, shared by the service and bench/.

The rules, in order: whole ready nodes only; as few topology groups as possible (one NVLink
clique where the class has cliques, else one rack); inside the chosen groups, the group whose
free capacity fits the request most tightly (best fit), so that large contiguous blocks stay
whole for the next large request; then the fewest nodes, then names, for determinism.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FreeNode:
    name: str
    gpus: int
    rack: str = ""
    clique: str = ""
    zone: str = ""


@dataclass(frozen=True)
class Suggestion:
    nodes: tuple[FreeNode, ...]

    @property
    def gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)

    @property
    def racks(self) -> list[str]:
        return sorted({node.rack for node in self.nodes})

    @property
    def cliques(self) -> list[str]:
        return sorted({node.clique for node in self.nodes if node.clique})


def suggest(candidates: Iterable[FreeNode], gpus: int) -> Suggestion | None:
    """Nodes covering ``gpus`` from ``candidates`` (all free and ready), or None if too few."""
    if gpus <= 0:
        raise ValueError("ask for at least one GPU")
    nodes = [node for node in candidates if node.gpus > 0]
    if sum(node.gpus for node in nodes) < gpus:
        return None
    by_clique = any(node.clique for node in nodes)
    levels = ("clique", "rack") if by_clique else ("rack",)
    return Suggestion(tuple(_pick(nodes, gpus, levels)))


def first_fit(candidates: Iterable[FreeNode], gpus: int) -> Suggestion | None:
    """The baseline: free nodes in name order until the request is covered."""
    chosen: list[FreeNode] = []
    for node in sorted(candidates, key=lambda n: n.name):
        if sum(n.gpus for n in chosen) >= gpus:
            break
        if node.gpus > 0:
            chosen.append(node)
    return Suggestion(tuple(chosen)) if sum(n.gpus for n in chosen) >= gpus else None


def _pick(nodes: Sequence[FreeNode], gpus: int, levels: tuple[str, ...]) -> list[FreeNode]:
    if not levels:
        return _fewest_nodes(nodes, gpus)
    groups = _group(nodes, levels[0])
    chosen: list[FreeNode] = []
    for members, share in _cover_with_groups(groups, gpus):
        chosen.extend(_pick(members, share, levels[1:]))
    return chosen


def _group(nodes: Iterable[FreeNode], level: str) -> list[list[FreeNode]]:
    groups: dict[str, list[FreeNode]] = defaultdict(list)
    for node in nodes:
        key = getattr(node, level)
        # Nodes without the label cannot be told apart: each is its own group.
        groups[key or f"\0{node.name}"].append(node)
    return [groups[key] for key in sorted(groups)]


def _capacity(group: Sequence[FreeNode]) -> int:
    return sum(node.gpus for node in group)


def _cover_with_groups(
    groups: list[list[FreeNode]], gpus: int
) -> list[tuple[list[FreeNode], int]]:
    """Groups and the GPUs each contributes: the tightest single group if one fits, else the
    largest groups first and the tightest fitting group for the remainder."""
    remaining = gpus
    pool = sorted(groups, key=_capacity)  # stable: ties keep name order
    chosen: list[tuple[list[FreeNode], int]] = []
    while remaining > 0:
        largest = _capacity(pool[-1])
        group = next(g for g in pool if _capacity(g) >= min(remaining, largest))
        share = min(remaining, _capacity(group))
        chosen.append((group, share))
        pool.remove(group)
        remaining -= share
    return chosen


def _fewest_nodes(nodes: Sequence[FreeNode], gpus: int) -> list[FreeNode]:
    """Largest nodes first, then the smallest node that covers what is left."""
    pool = sorted(nodes, key=lambda n: (n.gpus, n.name))
    chosen: list[FreeNode] = []
    remaining = gpus
    while remaining > 0:
        largest = pool[-1].gpus
        node = next(n for n in pool if n.gpus >= min(remaining, largest))
        chosen.append(node)
        pool.remove(node)
        remaining -= node.gpus
    return sorted(chosen, key=lambda n: n.name)


def fragmentation(free_by_group: dict[str, int], whole_by_group: dict[str, int]) -> float:
    """Share of free GPUs sitting in groups that are no longer whole (0 = none fragmented)."""
    free = sum(free_by_group.values())
    if free == 0:
        return 0.0
    broken = sum(count for group, count in free_by_group.items()
                 if count < whole_by_group.get(group, 0))
    return broken / free
