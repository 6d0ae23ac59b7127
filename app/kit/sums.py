"""Whole parts making an exact total: which machines (by their GPUs) make a count of GPUs."""

from __future__ import annotations

from collections.abc import Sequence


def exact_parts(sizes: Sequence[int], total: int) -> list[int] | None:
    """Indexes into ``sizes`` whose values sum to exactly ``total``, as few as possible (the
    earlier index first among equals); None when no selection does. ``total`` 0 is the empty
    selection. Pseudo-polynomial: ``total`` is a GPU count, a few hundred at most."""
    if total < 0:
        return None
    if total == 0:
        return []
    # best[s]: the fewest indexes summing to s found so far.
    best: dict[int, list[int]] = {0: []}
    for index, size in enumerate(sizes):
        if size <= 0:
            continue
        for reached, chosen in sorted(best.items(), reverse=True):
            after = reached + size
            if after > total:
                continue
            if after not in best or len(chosen) + 1 < len(best[after]):
                best[after] = [*chosen, index]
    found = best.get(total)
    return sorted(found) if found is not None else None


def reachable(sizes: Sequence[int], total: int) -> bool:
    return exact_parts(sizes, total) is not None
