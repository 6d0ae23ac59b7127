"""`portalctl kubeconfig`: a kubeconfig printed, written, or merged into the user's own."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config

from app.portalctl.kubeconfig import merge, ttl_seconds
from tests.portalctl.conftest import Portal, PortalCtl

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
