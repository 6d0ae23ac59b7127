"""Issue 61 in portalctl: quota of MIG slices and shares of one GPU asked and approved with
--slices/--mig-profile and --gpu-share, said in words in the last columns; whole GPUs of a
MIG-only class refused naming its slices."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import update

from app.gpu_classes.models import GpuClass
from tests import factories
from tests.portalctl.conftest import Portal, PortalCtl, Result
from tests.quotas.units_fleet import A100_SLICES, SLICES_MESSAGE


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _with_slices_and_shares(portal: Portal) -> None:
    with portal.database.transaction() as db:
        a100 = factories.gpu_class(db, "NVIDIA-A100-SXM4-80GB", display_name="A100 SXM4 80GB")
        factories.node(db, factories.env_host(db), a100, "a100-mig-n1", gpu_count=0,
                       mig_strategy="mixed", mig_resources=A100_SLICES)
        db.execute(update(GpuClass).where(GpuClass.id == portal.h100_id).values(share_step=25))


def _as_admin(portal: Portal, portalctl: PortalCtl) -> None:
    assert portalctl("--profile", "ops", "login", "--url", portal.url, "--token-stdin",
                     stdin=portal.tokens["platform-admin"]).exit_code == 0


def test_whole_gpus_of_a_mig_only_class_are_refused_naming_its_slices(
        portal: Portal, portalctl: PortalCtl) -> None:
    _with_slices_and_shares(portal)
    portalctl.login(portal, "acme-admin")
    refused = portalctl("quota", "request", "--gpu-class", "a100", "--gpus", "2",
                        "--reason", "notebooks")
    assert refused.exit_code == 1
    assert SLICES_MESSAGE in " ".join(refused.stderr.split())


def test_slices_and_a_share_are_asked_and_approved_and_said_in_words(
        portal: Portal, portalctl: PortalCtl) -> None:
    _with_slices_and_shares(portal)
    portalctl.login(portal, "acme-admin")
    slices = _json(portalctl("quota", "request", "--gpu-class", "a100", "--slices", "3",
                             "--mig-profile", "1g.10gb", "--reason", "notebooks", "-o", "json"))
    assert (slices["unit"], slices["mig_profile"], slices["amount"], slices["grant"]) == (
        "mig", "1g.10gb", 3, "3 \u00d7 1g.10gb of A100 SXM4 80GB")
    share = _json(portalctl("quota", "request", "--gpu-class", "h100", "--gpu-share", "0.5",
                            "--reason", "inference", "-o", "json"))
    assert (share["unit"], share["gpu_share"], share["grant"]) == (
        "share", "0.5", "0.5 of an H100 80GB")
    table = portalctl("quota", "requests")
    header = table.stdout.splitlines()[0].split()
    assert header[-4:] == ["GRANT", "UNIT", "MIG_PROFILE", "AMOUNT"]

    _as_admin(portal, portalctl)
    approved = _json(portalctl("--profile", "ops", "quota", "approve", str(slices["id"]),
                               "--slices", "2", "-o", "json"))
    assert (approved["approved_slices"], approved["approved_grant"]) == (
        2, "2 \u00d7 1g.10gb of A100 SXM4 80GB")
    assert _json(portalctl("--profile", "ops", "quota", "approve", str(share["id"]),
                           "--gpu-share", "0.25", "-o", "json"))["approved_gpu_share"] == "0.25"
    quota = _json(portalctl("quota", "show", "-o", "json"))
    assert sorted((q["unit"], q["grant"]) for q in quota) == [
        ("gpu", "16 H100 80GB GPUs"), ("mig", "2 \u00d7 1g.10gb of A100 SXM4 80GB"),
        ("share", "0.25 of an H100 80GB")]


def test_a_cluster_of_slices_is_created_and_resized_with_slices(
        portal: Portal, portalctl: PortalCtl) -> None:
    _with_slices_and_shares(portal)
    portalctl.login(portal, "acme-admin")
    asked = _json(portalctl("quota", "request", "--gpu-class", "a100", "--slices", "2",
                            "--mig-profile", "1g.10gb", "--reason", "notebooks", "-o", "json"))
    _as_admin(portal, portalctl)
    assert portalctl("--profile", "ops", "quota", "approve", str(asked["id"])).exit_code == 0
    created = _json(portalctl("clusters", "create", "notebooks", "--gpu-class", "a100",
                              "--slices", "2", "--mig-profile", "1g.10gb", "-o", "json"))
    assert (created["unit"], created["amount"], created["grant"]) == (
        "mig", 2, "2 \u00d7 1g.10gb of A100 SXM4 80GB")
    header = portalctl("clusters", "list").stdout.splitlines()[0].split()
    assert header[-4:] == ["GRANT", "UNIT", "MIG_PROFILE", "AMOUNT"]
    beyond = portalctl("clusters", "resize", "notebooks", "--slices", "3")
    assert beyond.exit_code == 1
    assert "3 \u00d7 1g.10gb asked: request more quota first" in " ".join(beyond.stderr.split())
    off_unit = portalctl("clusters", "resize", "notebooks", "--gpus", "1")
    assert off_unit.exit_code == 1 and "one unit for its life" in off_unit.stderr
