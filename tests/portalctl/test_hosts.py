"""`portalctl hosts` against the real app: credentials from a file or stdin (never argv),
never printed back; cordon, drain, check and delete as the API does them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.lab.pki import CertificateAuthority
from tests.portalctl.conftest import Portal, PortalCtl, Result
from tests.support.kube_server import kubeconfig_yaml

SECRET = "s3cr3t-sa-token-of-gpu-eu-2"
CA = CertificateAuthority()


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_an_admin_registers_inspects_cordons_drains_and_deletes_a_host(
        portal: Portal, portalctl: PortalCtl, tmp_path: Path) -> None:
    portalctl.login(portal, "platform-admin")
    config = tmp_path / "gpu-eu-2.yaml"
    config.write_text(kubeconfig_yaml("https://gpu-eu-2.example.com:6443", CA.cert_pem,
                                      token=SECRET))
    outputs: list[Result] = []

    def run(*args: str, stdin: str | None = None) -> Result:
        result = portalctl(*args, stdin=stdin)
        outputs.append(result)
        return result

    registered = _json(run("hosts", "register", "gpu-eu-2", "--region", "eu-west",
                           "--kubeconfig", str(config), "-o", "json"))
    assert registered["credentials"]["server"] == "https://gpu-eu-2.example.com:6443"
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(CA.cert_pem)
    by_token = run("hosts", "register", "gpu-us-1", "--region", "us-east", "--server",
                   "https://gpu-us-1.example.com", "--ca", str(ca_file), "--token", "-",
                   stdin=SECRET + "\n")
    assert by_token.exit_code == 0, by_token.stderr
    table = run("hosts", "list").stdout
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert "eu-west" in rows["gpu-eu-2"] and "not checked" in rows["gpu-eu-2"]
    assert "token https://gpu-us-1.example.com" in rows["gpu-us-1"]
    assert _json(run("hosts", "cordon", "gpu-eu-2", "--reason", "maintenance", "-o",
                     "json"))["state"] == "cordoned"
    drained = _json(run("hosts", "drain", "gpu-eu-2", "-o", "json"))
    assert (drained["state"], drained["takes_new_clusters"]) == ("draining", False)
    assert _json(run("hosts", "uncordon", "gpu-eu-2", "-o", "json"))["state"] == "active"
    checked = run("hosts", "check", "gpu-eu-2")
    assert checked.exit_code == 1 and "api-reachable" in checked.stdout  # not reachable here
    shown = run("hosts", "show", "gpu-eu-2").stdout
    assert "api-reachable" in shown and "vcluster-chart" in shown
    assert run("hosts", "delete", "gpu-us-1").exit_code == 0
    assert run("hosts", "show", "gpu-us-1").exit_code == 3
    for result in outputs:
        assert SECRET not in result.stdout + result.stderr


def test_credentials_are_refused_from_argv_and_bad_ones_name_the_field(
        portal: Portal, portalctl: PortalCtl, tmp_path: Path) -> None:
    portalctl.login(portal, "platform-admin")
    neither = portalctl("hosts", "register", "gpu-eu-2")
    assert neither.exit_code == 2 and "--kubeconfig" in neither.stderr
    missing = portalctl("hosts", "register", "gpu-eu-2", "--kubeconfig",
                        str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2 and "no file" in missing.stderr
    plain = tmp_path / "plain.yaml"
    plain.write_text(kubeconfig_yaml("http://gpu-eu-2.example.com", CA.cert_pem, token=SECRET))
    refused = portalctl("hosts", "register", "gpu-eu-2", "--kubeconfig", str(plain))
    assert refused.exit_code != 0 and "https://" in refused.stderr
    assert SECRET not in refused.stderr + refused.stdout
    tenant_admin = portalctl("--profile", "acme", "login", "--url", portal.url,
                             "--token-stdin", stdin=portal.tokens["acme-admin"])
    assert tenant_admin.exit_code == 0
    assert portalctl("--profile", "acme", "hosts", "list").exit_code == 4


def test_an_admin_sets_and_removes_a_hosts_webhook_url(
        portal: Portal, portalctl: PortalCtl, tmp_path: Path) -> None:
    portalctl.login(portal, "platform-admin")
    config = tmp_path / "gpu-eu-3.yaml"
    config.write_text(kubeconfig_yaml("https://gpu-eu-3.example.com:6443", CA.cert_pem,
                                      token=SECRET))
    registered = _json(portalctl("hosts", "register", "gpu-eu-3", "--kubeconfig", str(config),
                                 "--webhook-url", "https://hook.eu-3.example:9443", "-o",
                                 "json"))
    assert registered["webhook_endpoint"] == (
        f"https://hook.eu-3.example:9443/mutate-pods/hosts/{registered['id']}")
    shown = portalctl("hosts", "show", "gpu-eu-3").stdout
    assert "/mutate-pods/hosts/" in shown
    refused = portalctl("hosts", "update", "gpu-eu-3", "--webhook-url", "http://hook.example")
    assert refused.exit_code != 0 and "https://" in refused.stderr
    removed = _json(portalctl("hosts", "update", "gpu-eu-3", "--webhook-url", "", "-o",
                              "json"))
    assert (removed["webhook_url"], removed["webhook_endpoint"]) == (None, "")
    nothing = portalctl("hosts", "update", "gpu-eu-3")
    assert nothing.exit_code == 2 and "--webhook-url" in nothing.stderr
    assert portalctl("hosts", "delete", "gpu-eu-3").exit_code == 0
