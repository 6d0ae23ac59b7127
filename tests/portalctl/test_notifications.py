"""`portalctl notifications prefs|set`: a person's email choices per kind, on the real app."""

from __future__ import annotations

import json

from tests.portalctl.conftest import Portal, PortalCtl


def test_a_tenant_admin_lists_and_turns_off_a_kind_but_not_the_mandatory_one(
        portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")

    table = portalctl("notifications", "prefs")
    assert table.exit_code == 0, table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:] if line}
    assert "host.unreachable" not in rows  # a platform kind: not an acme admin's
    assert rows["cluster.ready"].split()[1] == "on"
    assert rows["cluster.deletion_announced"].endswith("cannot be turned off")

    turned = portalctl("notifications", "set", "cluster.ready", "off")
    assert (turned.exit_code, turned.stdout) == (0, "cluster.ready: email off\n")
    listed = json.loads(portalctl("notifications", "prefs", "-o", "json").stdout)
    assert {c["kind"]: c["email"] for c in listed}["cluster.ready"] is False

    refused = portalctl("notifications", "set", "cluster.deletion_announced", "off")
    assert refused.exit_code == 1
    assert "cannot be turned off" in refused.stderr
    unknown = portalctl("notifications", "set", "cluster.exploded", "off")
    assert unknown.exit_code == 1 and "no notification kind 'cluster.exploded'" in unknown.stderr
    bad = portalctl("notifications", "set", "cluster.ready", "maybe")
    assert bad.exit_code == 2


def test_a_platform_admin_sees_the_platform_kinds(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "platform-admin")
    listed = json.loads(portalctl("notifications", "prefs", "-o", "json").stdout)
    kinds = {c["kind"] for c in listed}
    assert {"quota.requested", "host.unreachable", "kubeconfig.expiring"} <= kinds
    assert "cluster.ready" not in kinds
