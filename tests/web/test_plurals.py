"""Counted nouns on pages: "1 node" and "4 GPUs", never "1 nodes", "1 hours" or "check(s)"."""

from __future__ import annotations

import pytest

from app.web.templating import TEMPLATES_DIR, templates


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ('{{ 1 | counted("node") }}', "1 node"),
        ('{{ 4 | counted("GPU") }}', "4 GPUs"),
        ('{{ 0 | counted("check") }}', "0 checks"),
        ('{{ (3600 / 3600) | counted("hour") }}', "1 hour"),
        ('{{ (5400 / 3600) | counted("hour") }}', "1.5 hours"),
        ('{{ 2 | counted("NVLink clique") }}', "2 NVLink cliques"),
        ('{{ 1 | plural("rack") }} r1', "rack r1"),
    ],
)
def test_the_counted_filter_says_numbers_as_people_do(source: str, text: str) -> None:
    assert templates.env.from_string(source).render() == text


def test_the_node_suggestion_counts_one_node_in_the_singular() -> None:
    page = templates.env.get_template("nodes/_suggestion.html").render(
        errors={},
        free=[],
        csrf_token="t",
        suggestion={
            "tenant": "demo",
            "gpu_class": 1,
            "gpus_requested": 4,
            "gpus": 4,
            "nodes": [{"name": "gb200-c1-n1", "gpus": 4, "zone": "z", "rack": "r1"}],
            "racks": ["r1"],
            "cliques": [],
            "quota_gpus": 8,
            "dedicated_gpus": 0,
            "note": "",
        },
    )
    assert "4 GPUs on 1 node in rack r1" in " ".join(page.split())


def test_no_template_writes_a_plural_in_brackets() -> None:
    """Templates count with the filter: "check(s)" or "node(s)" reads as a shrug."""
    offenders = [
        str(path.relative_to(TEMPLATES_DIR))
        for path in TEMPLATES_DIR.rglob("*.html")
        if any(
            f"{noun}(s)" in path.read_text()
            for noun in ("check", "node", "GPU", "hour", "day", "cluster")
        )
    ]
    assert offenders == []
