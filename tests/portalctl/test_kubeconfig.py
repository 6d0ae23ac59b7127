"""`portalctl kubeconfig`: a kubeconfig printed, written, or merged into the user's own."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config

from app.kube.memory import fake_service_account_token
from app.portalctl.kubeconfig import conflicts, merge, ttl_seconds
from tests.portalctl.conftest import Portal, PortalCtl, Result

# The official loader has no type hints.
k8s_config: Any = _k8s_config

THEIRS = {
    "apiVersion": "v1", "kind": "Config", "current-context": "home",
    "clusters": [{"name": "home", "cluster": {"server": "https://home.example.com:6443"}}],
    "users": [{"name": "me", "user": {"token": "home-token"}}],
    "contexts": [{"name": "home", "context": {"cluster": "home", "user": "me"}}],
}


def test_merge_adds_a_context_the_official_loader_reads_and_keeps_the_others(
    portal_with_ready_cluster: Portal, portalctl: PortalCtl, tmp_path: Path
) -> None:
    portal = portal_with_ready_cluster
    kubeconfig = tmp_path / "kube" / "config"
    kubeconfig.parent.mkdir()
    kubeconfig.write_text(yaml.safe_dump(THEIRS))
    portalctl.env["KUBECONFIG"] = str(kubeconfig)
    portalctl.login(portal, "acme-admin")

    merged = portalctl("kubeconfig", "train", "--role", "view", "--ttl", "1h", "--merge")
    assert merged.exit_code == 0, merged.stderr
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    config = yaml.safe_load(kubeconfig.read_text())
    assert config["current-context"] == "home"  # no --use: the current context stays
    assert THEIRS["contexts"][0] in config["contexts"]
    assert THEIRS["users"][0] in config["users"]
    contexts, current = k8s_config.list_kube_config_contexts(str(kubeconfig))
    assert current["name"] == "home"
    added = next(c["name"] for c in contexts if c["name"] != "home")
    assert added in merged.stderr

    switched = portalctl("kubeconfig", "train", "--merge", "--use")
    assert switched.exit_code == 0, switched.stderr
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    assert configuration.host == "https://train.acme.vc.example.com"
    assert configuration.api_key["BearerToken"].startswith("Bearer ")
    config = yaml.safe_load(kubeconfig.read_text())
    assert [c["name"] for c in config["contexts"]] == ["home", added]  # replaced, not doubled


def test_a_view_and_an_admin_kubeconfig_merge_side_by_side(
    portal_with_ready_cluster: Portal, portalctl: PortalCtl, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "config"
    portalctl.env["KUBECONFIG"] = str(kubeconfig)
    portalctl.login(portal_with_ready_cluster, "acme-admin")
    for role in ("view", "admin", "view"):
        merged = portalctl("kubeconfig", "train", "--role", role, "--merge")
        assert merged.exit_code == 0, merged.stderr
        assert f"Context acme-train-{role} merged" in merged.stderr

    config = yaml.safe_load(kubeconfig.read_text())
    assert {c["name"]: c["context"]["user"] for c in config["contexts"]} == {
        "acme-train-view": "acme-train-view", "acme-train-admin": "acme-train-admin"}
    assert [c["name"] for c in config["clusters"]] == ["acme-train"]
    users = {u["name"]: u["user"]["token"] for u in config["users"]}
    for role in ("view", "admin"):
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig), context=f"acme-train-{role}",
                                    client_configuration=configuration)
        assert configuration.api_key["BearerToken"] == f"Bearer {users[f'acme-train-{role}']}"
    assert config["current-context"] == "acme-train-view"  # the first merge into an empty file


def test_merge_never_repoints_someone_elses_entry_without_force(
    portal_with_ready_cluster: Portal, portalctl: PortalCtl, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "config"
    theirs = {**THEIRS, "contexts": [
        *THEIRS["contexts"], {"name": "acme-train-view", "context": {"cluster": "home",
                                                                     "user": "me"}}]}
    kubeconfig.write_text(yaml.safe_dump(theirs))
    before = kubeconfig.read_text()
    portalctl.env["KUBECONFIG"] = str(kubeconfig)
    portalctl.login(portal_with_ready_cluster, "acme-admin")

    refused = portalctl("kubeconfig", "train", "--merge", "--use")
    assert refused.exit_code == 1
    assert "context 'acme-train-view' points at cluster 'home' and user 'me'" in refused.stderr
    assert "--force" in refused.stderr and "is revoked" in refused.stderr
    assert kubeconfig.read_text() == before
    assert _json(portalctl("grants", "list", "train", "-o", "json")) == []

    forced = portalctl("kubeconfig", "train", "--merge", "--use", "--force")
    assert forced.exit_code == 0, forced.stderr
    config = yaml.safe_load(kubeconfig.read_text())
    assert {c["name"]: c["context"]["user"] for c in config["contexts"]} == {
        "home": "me", "acme-train-view": "acme-train-view"}
    assert portalctl("kubeconfig", "train", "--force").exit_code == 2  # only with --merge


def test_a_user_entry_is_the_same_user_when_its_token_acts_as_the_same_account() -> None:
    def issued(account: str) -> dict[str, Any]:
        token = fake_service_account_token("gpu-tenant-portal", account, None, 600)
        return {"users": [{"name": "acme-train-view", "user": {"token": token}}]}

    first = issued("user-3-view")
    assert conflicts(first, issued("user-3-view")) == []  # a fresh token of the same account
    assert conflicts(first, issued("user-4-view")) == [
        "user 'acme-train-view' holds another credential"]
    certificate = {"users": [{"name": "acme-train-view",
                              "user": {"client-certificate-data": "Zm9v"}}]}
    assert conflicts(certificate, issued("user-3-view")) != []


def test_a_kubeconfig_is_printed_or_written_to_a_private_file(
    portal_with_ready_cluster: Portal, portalctl: PortalCtl, tmp_path: Path
) -> None:
    portalctl.login(portal_with_ready_cluster, "acme-admin")
    printed = portalctl("kubeconfig", "train", "--tenant", "acme")
    assert printed.exit_code == 0, printed.stderr
    assert yaml.safe_load(printed.stdout)["kind"] == "Config"
    target = tmp_path / "train.yaml"
    assert portalctl("kubeconfig", "train", "-f", str(target)).exit_code == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    k8s_config.load_kube_config(config_file=str(target),
                                client_configuration=k8s_client.Configuration())

    assert portalctl("kubeconfig", "nope").exit_code == 3
    assert portalctl("kubeconfig", "train", "--ttl", "soon").exit_code == 2
    assert portalctl("kubeconfig", "train", "--use").exit_code == 2
    portalctl.env["PORTALCTL_PROFILE"] = "viewer"
    portalctl.login(portal_with_ready_cluster, "acme-viewer")
    read_only = portalctl("kubeconfig", "train")
    assert read_only.exit_code == 4 and "read-only" in read_only.stderr


def test_durations_and_merging_by_name() -> None:
    assert [ttl_seconds(t) for t in ("1h", "90m", "1h30m", "600")] == [3600, 5400, 5400, 600]
    with pytest.raises(ValueError, match="not a duration"):
        ttl_seconds("1x")
    issued = {"current-context": "a", "clusters": [{"name": "a", "cluster": {"server": "new"}}],
              "users": [], "contexts": [{"name": "a", "context": {}}]}
    fresh = merge({}, issued, use=False)
    assert fresh["current-context"] == "a" and fresh["kind"] == "Config"
    again = merge(fresh, issued, use=False)
    assert again["clusters"] == issued["clusters"]


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)
