"""A tenant admin's journey with portalctl: sign in, tenants, quota, clusters, sign out."""

from __future__ import annotations

import json
import stat
from typing import Any

import httpx
import yaml
from sqlalchemy import func, select, update

from app.clusters.models import VirtualCluster
from tests.portalctl.conftest import Portal, PortalCtl


def test_login_checks_the_token_and_keeps_it_readable_by_the_user_only(
    portal: Portal, portalctl: PortalCtl
) -> None:
    signed_in = portalctl.login(portal, "acme-admin")
    assert signed_in.exit_code == 0, signed_in.stderr
    assert "acme-admin@example.com" in signed_in.stdout
    config = portalctl.home / ".config" / "portalctl" / "config.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert portal.tokens["acme-admin"] in config.read_text()

    refused = portalctl("--profile", "other", "login", "--url", portal.url, "--token-stdin",
                        stdin="gtp_not-a-token\n")
    assert refused.exit_code == 4
    assert "unknown, expired or revoked" in refused.stderr and "Traceback" not in refused.stderr
    assert "other" not in config.read_text()


def test_profiles_are_chosen_by_flag_or_environment(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    assert portalctl("--profile", "globex", "login", "--url", portal.url, "--token-stdin",
                     stdin=portal.tokens["globex-admin"]).exit_code == 0
    assert _json(portalctl("whoami", "-o", "json"))["email"] == "acme-admin@example.com"
    assert _json(portalctl("--profile", "globex", "whoami", "-o", "json"))["email"] == (
        "globex-admin@example.com")
    assert "globex (admin)" in portalctl("--profile", "globex", "whoami").stdout
    portalctl.env["PORTALCTL_PROFILE"] = "globex"
    assert _json(portalctl("whoami", "-o", "json"))["email"] == "globex-admin@example.com"
    portalctl.env["PORTALCTL_PROFILE"] = "nobody"
    missing = portalctl("tenants", "list")
    assert missing.exit_code == 4 and "not signed in" in missing.stderr


def test_reads_print_the_api_objects_as_json_yaml_or_a_table(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "platform-admin")
    tenants = _json(portalctl("tenants", "list", "-o", "json"))
    api = httpx.get(f"{portal.url}/api/v1/tenants",
                    headers={"Authorization": f"Bearer {portal.tokens['platform-admin']}"})
    assert tenants == api.json()["items"]
    assert {t["slug"] for t in tenants} == {"acme", "globex"}
    assert _json(portalctl("tenants", "list", "-o", "json", "--limit", "1")) == tenants[:1]
    assert yaml.safe_load(portalctl("tenants", "show", "acme", "-o", "yaml").stdout)["slug"] == (
        "acme")
    table = portalctl("tenants", "list").stdout.splitlines()
    assert table[0].split()[:3] == ["SLUG", "DISPLAY_NAME", "STATE"]
    assert "\x1b[" not in "\n".join(table)  # no colour off a terminal


def test_missing_and_forbidden_things_exit_3_and_4_with_the_servers_detail(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "acme-viewer")
    missing = portalctl("clusters", "show", "nope", "--tenant", "acme")
    assert missing.exit_code == 3 and missing.stderr.startswith("error: ")
    assert "Traceback" not in missing.stderr
    forbidden = portalctl("clusters", "create", "train", "--tenant", "acme")
    assert forbidden.exit_code == 4, forbidden.stderr
    assert forbidden.stderr.strip() != "error:"
    elsewhere = portalctl("tenants", "show", "globex")
    assert elsewhere.exit_code == 3  # another tenant is hidden, as in the API
    usage = portalctl("clusters", "create")
    assert usage.exit_code == 2


def test_a_tenant_admin_requests_quota_and_cancels_it(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "acme-admin")
    requested = portalctl("quota", "request", "--gpu-class", str(portal.h100_id), "--gpus", "8",
                          "--reason", "fine-tuning", "-o", "json")
    assert requested.exit_code == 0, requested.stderr
    request = _json(requested)
    assert (request["tenant"], request["gpus"], request["state"]) == ("acme", 8, "pending")
    listed = _json(portalctl("quota", "requests", "-o", "json"))
    assert [r["id"] for r in listed] == [request["id"]]
    cancelled = _json(portalctl("quota", "cancel", str(request["id"]), "-o", "json"))
    assert cancelled["state"] == "cancelled"
    quota = _json(portalctl("quota", "show", "-o", "json"))
    assert [(q["gpu_class_id"], q["approved_gpus"]) for q in quota] == [(portal.h100_id, 16)]
    invalid = portalctl("quota", "request", "--gpu-class", str(portal.h100_id), "--gpus", "0",
                        "--reason", "none")
    assert invalid.exit_code == 1 and "gpus" in invalid.stderr


def test_a_platform_admin_approves_a_request(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    request = _json(portalctl("quota", "request", "--gpu-class", str(portal.h100_id),
                              "--gpus", "4", "--reason", "more", "-o", "json"))
    assert portalctl("quota", "approve", str(request["id"])).exit_code == 4
    assert portalctl("--profile", "ops", "login", "--url", portal.url, "--token-stdin",
                     stdin=portal.tokens["platform-admin"]).exit_code == 0
    approved = _json(portalctl("--profile", "ops", "quota", "approve", str(request["id"]),
                               "--gpus", "2", "-o", "json"))
    assert (approved["state"], approved["approved_gpus"]) == ("approved", 2)


def test_clusters_are_created_once_per_key_and_waited_for(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "acme-admin")
    create = ("clusters", "create", "train", "--gpu-class", str(portal.h100_id), "--gpus", "4",
              "--idempotency-key", "3f1c2b8e-6c1a-4d7e-9a51-0f2d7c1b9e44", "-o", "json")
    first = portalctl(*create)
    assert first.exit_code == 0, first.stderr
    assert _json(first)["phase"] == "Provisioning"
    assert portalctl(*create).exit_code == 0  # a retry with the same key
    assert _clusters_named(portal, "train") == 1

    timed_out = portalctl(*create, "--wait", "--timeout", "0")
    assert timed_out.exit_code == 1 and "not Ready" in timed_out.stderr

    _set_conditions(portal, "train", [
        _condition("NamespaceReady", "True", "Created"), _condition("Ready", "True", "Ready")])
    ready = portalctl(*create, "--wait")
    assert ready.exit_code == 0, ready.stderr
    assert "NamespaceReady=True Created" in ready.stderr
    assert _json(ready)["phase"] == "Ready"

    failing = ("clusters", "create", "broken", "--cpu-millicores", "1000", "-o", "json",
               "--idempotency-key", "8d0f9e1a-2b3c-4d5e-8f70-1a2b3c4d5e6f")
    assert portalctl(*failing).exit_code == 0
    _set_conditions(portal, "broken", [_condition("Failed", "True", "HelmFailed")])
    failed = portalctl(*failing, "--wait")
    assert failed.exit_code == 1 and "Failed=True HelmFailed" in failed.stderr
    assert "broken failed" in failed.stderr

    names = [c["name"] for c in _json(portalctl("clusters", "list", "-o", "json"))]
    assert sorted(names) == ["broken", "train"]
    assert _json(portalctl("clusters", "list", "-o", "json", "--limit", "1"))[0]["name"] in names
    shown = portalctl("clusters", "show", "train")
    assert "NamespaceReady" in shown.stdout and "Ready" in shown.stdout


def test_clusters_are_resized_and_deleted(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    assert portalctl("clusters", "create", "train", "--gpu-class", str(portal.h100_id),
                     "--gpus", "2").exit_code == 0
    resized = _json(portalctl("clusters", "resize", "train", "--gpus", "6", "-o", "json"))
    assert (resized["gpus"], resized["generation"]) == (6, 2)
    over = portalctl("clusters", "resize", "train", "--gpus", "99")
    assert over.exit_code == 1 and over.stderr.startswith("error: ")
    assert portalctl("clusters", "resize", "train").exit_code == 2
    deleted = portalctl("clusters", "delete", "train", "--yes")
    assert deleted.exit_code == 0, deleted.stderr
    assert _json(portalctl("clusters", "show", "train", "-o", "json"))["deleting"] is True


def test_logout_revokes_the_token_and_forgets_the_profile(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "acme-admin")
    signed_out = portalctl("logout")
    assert signed_out.exit_code == 0, signed_out.stderr
    me = httpx.get(f"{portal.url}/api/v1/me",
                   headers={"Authorization": f"Bearer {portal.tokens['acme-admin']}"})
    assert me.status_code == 401
    assert portalctl("whoami").exit_code == 4


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _clusters_named(portal: Portal, name: str) -> int:
    with portal.database.session() as db:
        return db.scalar(select(func.count()).select_from(VirtualCluster)
                         .where(VirtualCluster.name == name)) or 0


def _condition(type_: str, status: str, reason: str) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": reason.lower(),
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}


def _set_conditions(portal: Portal, name: str, conditions: list[dict[str, Any]]) -> None:
    """What the worker would record; no worker runs here."""
    with portal.database.transaction() as db:
        db.execute(update(VirtualCluster).where(VirtualCluster.name == name)
                   .values(conditions=conditions))
