"""Node suggestions: whole ready nodes, fewest racks, one NVLink clique, tightest fit."""

from __future__ import annotations

import pytest

from app.nodes.placement import FreeNode, first_fit, fragmentation, suggest


def rack(name: str, nodes: int, gpus: int = 8, clique: str = "") -> list[FreeNode]:
    return [FreeNode(f"{name}-n{i}", gpus, rack=name, clique=clique) for i in range(1, nodes + 1)]


def test_one_rack_when_one_rack_can_hold_the_request() -> None:
    free = rack("rack-a", 2) + rack("rack-b", 3)
    chosen = suggest(free, 16)
    assert chosen is not None
    assert [n.name for n in chosen.nodes] == ["rack-a-n1", "rack-a-n2"]
    assert chosen.racks == ["rack-a"]


def test_the_tightest_rack_is_taken_so_big_blocks_stay_whole() -> None:
    free = rack("rack-big", 8) + rack("rack-small", 2)
    chosen = suggest(free, 16)
    assert chosen is not None and chosen.racks == ["rack-small"]
    baseline = first_fit(free, 16)
    assert baseline is not None and baseline.racks == ["rack-big"]


def test_spanning_takes_the_largest_racks_first() -> None:
    free = rack("rack-a", 1) + rack("rack-b", 3) + rack("rack-c", 2)
    chosen = suggest(free, 40)  # 5 nodes: rack-b whole, then rack-c whole
    assert chosen is not None
    assert chosen.racks == ["rack-b", "rack-c"] and chosen.gpus == 40


def test_whole_nodes_may_exceed_the_request() -> None:
    chosen = suggest(rack("rack-a", 4), 12)
    assert chosen is not None and chosen.gpus == 16 and len(chosen.nodes) == 2


def test_one_nvlink_clique_where_the_class_has_cliques() -> None:
    free = (rack("rack-1", 2, 4, clique="c1") + rack("rack-2", 2, 4, clique="c2")
            + rack("rack-3", 1, 4, clique="c2"))
    chosen = suggest(free, 12)
    assert chosen is not None and chosen.cliques == ["c2"]
    assert chosen.racks == ["rack-2", "rack-3"]


def test_too_few_free_gpus_gives_no_suggestion() -> None:
    assert suggest(rack("rack-a", 2), 24) is None
    assert first_fit(rack("rack-a", 2), 24) is None
    with pytest.raises(ValueError, match="at least one GPU"):
        suggest(rack("rack-a", 2), 0)


def test_fragmentation_counts_free_gpus_in_broken_racks() -> None:
    assert fragmentation({"a": 16, "b": 8}, {"a": 16, "b": 16}) == pytest.approx(8 / 24)
    assert fragmentation({}, {"a": 16}) == 0.0
