"""`portalctl members`, `grants` and `tokens` against the real app."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.portalctl.conftest import Portal, PortalCtl, Result


def test_a_tenant_admin_manages_members_by_email(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    before = _json(portalctl("members", "list", "-o", "json"))
    assert before == _api(portal, "acme-admin", "/api/v1/tenants/acme/members")["items"]
    assert {m["email"] for m in before} >= {"acme-viewer@example.com"}

    added = _json(portalctl("members", "add", "newbie@example.com", "--role", "viewer",
                            "-o", "json"))
    assert (added["email"], added["role"], added["pending"]) == (
        "newbie@example.com", "viewer", True)
    changed = _json(portalctl("members", "set-role", "newbie@example.com", "member",
                              "-o", "json"))
    assert (changed["id"], changed["role"]) == (added["id"], "member")
    by_id = _json(portalctl("members", "set-role", str(added["id"]), "admin", "-o", "json"))
    assert by_id["role"] == "admin"
    table = portalctl("members", "list").stdout
    assert "newbie@example.com" in table and table.splitlines()[0].startswith("ID")

    removed = portalctl("members", "remove", "newbie@example.com", "--yes")
    assert removed.exit_code == 0, removed.stderr
    emails = {m["email"] for m in _json(portalctl("members", "list", "-o", "json"))}
    assert "newbie@example.com" not in emails
    assert portalctl("members", "remove", "newbie@example.com", "--yes").exit_code == 3
    assert portalctl("members", "set-role", "bob@example.com", "owner").exit_code == 2


def test_members_are_for_the_tenants_admins(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-viewer")
    denied = portalctl("members", "add", "x@example.com", "--tenant", "acme")
    assert denied.exit_code == 4 and denied.stderr.startswith("error: ")
    hidden = portalctl("members", "list", "--tenant", "globex")
    assert hidden.exit_code == 3


def test_grants_list_and_revoke_what_kubeconfig_issued(
    portal_with_ready_cluster: Portal, portalctl: PortalCtl
) -> None:
    portal = portal_with_ready_cluster
    portalctl.login(portal, "acme-admin")
    assert _json(portalctl("grants", "list", "-o", "json")) == []
    assert portalctl("kubeconfig", "train", "--role", "view", "--ttl", "1h").exit_code == 0
    assert portalctl("kubeconfig", "train", "--role", "admin", "--ttl", "2h").exit_code == 0

    grants = _json(portalctl("grants", "list", "train", "-o", "json"))
    assert grants == _api(portal, "acme-admin",
                          "/api/v1/tenants/acme/clusters/train/kubeconfigs")["items"]
    assert sorted(g["role"] for g in grants) == ["admin", "view"]
    assert _json(portalctl("grants", "list", "-o", "json")) == grants  # every cluster
    assert len(_json(portalctl("grants", "list", "-o", "json", "--limit", "1"))) == 1

    admin_grant = next(g for g in grants if g["role"] == "admin")
    revoked = portalctl("grants", "revoke", "train", str(admin_grant["id"]))
    assert revoked.exit_code == 0, revoked.stderr
    assert [g["role"] for g in _json(portalctl("grants", "list", "train", "-o", "json"))] == [
        "view"]
    assert portalctl("grants", "revoke", "train", "999999").exit_code == 3
    assert portalctl("grants", "list", "nope").exit_code == 3


def test_tokens_are_created_once_listed_and_revoked(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    created = _json(portalctl("tokens", "create", "ci", "--scope", "read", "--days", "3",
                              "-o", "json"))
    assert created["token"].startswith("gtp_") and created["scopes"] == ["read"]
    me = httpx.get(f"{portal.url}/api/v1/me",
                   headers={"Authorization": f"Bearer {created['token']}"})
    assert me.json()["email"] == "acme-admin@example.com"

    listed = _json(portalctl("tokens", "list", "-o", "json"))
    assert listed == _api(portal, "acme-admin", "/api/v1/tokens")["items"]
    assert "token" not in listed[0] and listed[0]["name"] == "ci"
    assert portalctl("tokens", "revoke", str(created["id"])).exit_code == 0
    gone = httpx.get(f"{portal.url}/api/v1/me",
                     headers={"Authorization": f"Bearer {created['token']}"})
    assert gone.status_code == 401
    assert portalctl("tokens", "revoke", "999999").exit_code == 3

    shown = portalctl("tokens", "create", "laptop")
    assert shown.exit_code == 0 and "gtp_" in shown.stdout
    assert "not shown again" in shown.stderr
    assert portalctl("tokens", "create", "bad", "--scope", "root").exit_code == 2


def test_a_read_only_token_cannot_make_tokens(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-viewer")  # its token has the read scope only
    refused = portalctl("tokens", "create", "more")
    assert refused.exit_code == 4 and "read-only" in refused.stderr


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _api(portal: Portal, who: str, path: str) -> Any:
    response = httpx.get(f"{portal.url}{path}",
                         headers={"Authorization": f"Bearer {portal.tokens[who]}"})
    response.raise_for_status()
    return response.json()
