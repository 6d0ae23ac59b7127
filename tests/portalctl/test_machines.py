"""`portalctl machines` against the real app: the BMC password from stdin (never argv), never
printed back; provision, release and removal as the API does them."""

from __future__ import annotations

import json
from typing import Any

from tests.portalctl.conftest import Portal, PortalCtl, Result

PASSWORD = "bmc-pa55word-of-gpu-r4-07"


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _register(portal: Portal, portalctl: PortalCtl, *extra: str,
              stdin: str | None = PASSWORD + "\n") -> Result:
    return portalctl("machines", "register", "gpu-r4-07", "--host-cluster",
                     portal.host_cluster, "--bmc-address", "ipmi://10.0.4.7", "--bmc-user",
                     "admin", "--boot-mac", "0C:C4:7A:12:34:56", "--gpu-class",
                     portal.h100_product, "--gpus", "8", "--rack", "r4", *extra, stdin=stdin)


def test_an_admin_registers_provisions_releases_and_removes_a_machine(
        portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "platform-admin")
    outputs = [_register(portal, portalctl, "--password-stdin", "-o", "json")]
    registered = _json(outputs[0])
    assert (registered["boot_mac"], registered["phase"]) == ("0c:c4:7a:12:34:56", "registering")
    listed = portalctl("machines", "list")
    assert "gpu-r4-07" in listed.stdout and "8 x " in listed.stdout
    provisioned = _json(portalctl("machines", "provision", "gpu-r4-07", "-o", "json"))
    assert provisioned["desired"] == "provisioned"
    refused = portalctl("machines", "remove", "gpu-r4-07")
    assert refused.exit_code != 0 and "release it" in refused.stderr
    assert _json(portalctl("machines", "release", "gpu-r4-07", "-o", "json"))["desired"] == "pool"
    rotated = portalctl("machines", "credentials", "gpu-r4-07", "--bmc-user", "root",
                        "--password-stdin", stdin="n3w-" + PASSWORD + "\n")
    assert rotated.exit_code == 0, rotated.stderr
    removed = portalctl("machines", "remove", "gpu-r4-07")
    assert removed.exit_code == 0 and "being removed" in removed.stdout
    shown = portalctl("machines", "show", "gpu-r4-07")
    assert "deletion" in shown.stdout
    outputs += [listed, refused, rotated, removed, shown]
    for result in outputs:
        assert PASSWORD not in result.stdout + result.stderr


def test_the_password_never_comes_from_argv_and_tenants_are_refused(
        portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "platform-admin")
    no_password = _register(portal, portalctl, stdin="")
    assert no_password.exit_code == 2 and "--password-stdin" in no_password.stderr
    as_flag = _register(portal, portalctl, "--password", PASSWORD)
    assert as_flag.exit_code == 2
    portalctl("--profile", "acme", "login", "--url", portal.url, "--token-stdin",
              stdin=portal.tokens["acme-admin"])
    assert portalctl("--profile", "acme", "machines", "list").exit_code == 4
