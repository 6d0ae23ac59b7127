"""Every portalctl command that takes a GPU class takes its id, product or display name."""

from __future__ import annotations

import json
from typing import Any

from tests import factories
from tests.portalctl.conftest import Portal, PortalCtl, Result

PRODUCT = "NVIDIA-H100-80GB-HBM3"  # the tenancy's H100, shown as "H100 80GB"


def test_tenant_commands_take_the_product_or_the_display_name_in_any_case(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "acme-admin")
    for named in (PRODUCT, "nvidia-h100-80gb-hbm3", "h100 80GB", str(portal.h100_id)):
        asked = _json(
            portalctl(
                "quota",
                "request",
                "--gpu-class",
                named,
                "--gpus",
                "2",
                "--reason",
                "fine-tuning",
                "-o",
                "json",
            )
        )
        assert asked["gpu_class_id"] == portal.h100_id, named

    created = _json(
        portalctl(
            "clusters", "create", "train", "--gpu-class", "H100 80GB", "--gpus", "2", "-o", "json"
        )
    )
    assert created["gpu_class_id"] == portal.h100_id


def test_a_part_of_the_name_picks_the_one_class_containing_it(
    portal: Portal, portalctl: PortalCtl
) -> None:
    with portal.database.transaction() as db:
        l40s = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S 48GB").id
    portalctl.login(portal, "acme-admin")
    for typed, meant in (("h100", portal.h100_id), ("H100", portal.h100_id),
                         ("80gb-hbm3", portal.h100_id), ("l40s", l40s), ("48GB", l40s)):
        asked = _json(portalctl("quota", "request", "--gpu-class", typed, "--gpus", "1",
                                "--reason", "r", "-o", "json"))
        assert asked["gpu_class_id"] == meant, typed

    both = portalctl("quota", "request", "--gpu-class", "nvidia", "--gpus", "1", "--reason", "r")
    assert both.exit_code == 2
    assert both.stderr.startswith("error: GPU class 'nvidia' is ambiguous: it names ")
    assert PRODUCT in both.stderr and "NVIDIA-L40S" in both.stderr
    none = portalctl("quota", "request", "--gpu-class", "a100", "--gpus", "1", "--reason", "r")
    assert none.exit_code == 2 and "no GPU class 'a100'; choose one of " in none.stderr
    number = next(n for n in ("80", "100", "48") if int(n) not in (l40s, portal.h100_id))
    by_id_only = portalctl("quota", "request", "--gpu-class", number, "--gpus", "1",
                           "--reason", "r")
    assert by_id_only.exit_code == 2, number  # a number is an id, never a part of a name


def test_platform_admin_commands_take_the_display_name(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "platform-admin")
    host = ("--host-cluster", portal.host_cluster)
    nodes = _json(portalctl("nodes", "list", *host, "--gpu-class", "H100 80GB", "-o", "json"))
    assert len(nodes) == 8 and {n["gpu_class"] for n in nodes} == {PRODUCT}
    suggested = _json(
        portalctl(
            "nodes",
            "suggest",
            *host,
            "--tenant",
            "acme",
            "--gpu-class",
            "h100 80gb",
            "--gpus",
            "8",
            "-o",
            "json",
        )
    )
    assert suggested["gpu_class"] == PRODUCT and len(suggested["nodes"]) == 1
    capacity = _json(portalctl("fleet", "--gpu-class", "H100 80GB", "-o", "json"))
    assert {row["gpu_class"] for row in capacity} == {PRODUCT}
    template = _json(
        portalctl("templates", "create", "training", "--gpu-class", "h100 80gb", "-o", "json")
    )
    assert template["versions"][0]["gpu_class"] == PRODUCT


def test_an_unknown_or_ambiguous_class_is_one_error_listing_the_choices(
    portal: Portal, portalctl: PortalCtl
) -> None:
    with portal.database.transaction() as db:
        nvl = factories.gpu_class(db, "NVIDIA-H100-NVL", display_name="H100 80GB").id
    portalctl.login(portal, "acme-admin")

    unknown = portalctl(
        "quota", "request", "--gpu-class", "H200", "--gpus", "2", "--reason", "more"
    )
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith("error: no GPU class 'H200'; choose one of ")
    assert f"{portal.h100_id} {PRODUCT} (H100 80GB)" in unknown.stderr
    assert f"{nvl} NVIDIA-H100-NVL (H100 80GB)" in unknown.stderr
    assert "integer" not in unknown.stderr

    ambiguous = portalctl("clusters", "create", "train", "--gpu-class", "h100 80gb", "--gpus", "2")
    assert ambiguous.exit_code == 2
    assert "'h100 80gb' is ambiguous" in ambiguous.stderr
    assert PRODUCT in ambiguous.stderr and "NVIDIA-H100-NVL" in ambiguous.stderr
    assert _json(portalctl("clusters", "list", "-o", "json")) == []
    by_product = _json(
        portalctl(
            "clusters",
            "create",
            "train",
            "--gpu-class",
            "NVIDIA-H100-NVL",
            "--gpus",
            "0",
            "-o",
            "json",
        )
    )
    assert by_product["gpu_class_id"] == nvl


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)
