"""Where a joining machine reaches its host's API server: the server and CA of the host's
kubeconfig (CA inline, or in a file beside PORTAL_KUBECONFIG), else kube-public/cluster-info."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from app.machines import join

CA_PEM = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
CA_DATA = base64.b64encode(CA_PEM).decode()


def kubeconfig(cluster: dict[str, str]) -> str:
    return yaml.safe_dump({
        "clusters": [{"name": "other", "cluster": {"server": "https://other:6443",
                                                   "certificate-authority-data": "eA=="}},
                     {"name": "host", "cluster": cluster}],
        "contexts": [{"name": "host", "context": {"cluster": "host", "user": "u"}}],
        "current-context": "host"})


def test_the_current_contexts_server_and_inline_ca() -> None:
    found = join.from_kubeconfig(kubeconfig({"server": "https://host:6443",
                                             "certificate-authority-data": CA_DATA}))
    assert found == join.JoinEndpoint("https://host:6443", CA_DATA)


def test_without_a_ca_there_is_no_endpoint_to_join() -> None:
    assert join.from_kubeconfig(kubeconfig({"server": "https://host:6443"})) is None
    assert join.from_kubeconfig("not: [yaml") is None


def test_the_environments_kubeconfig_may_name_its_ca_file(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(CA_PEM)
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig({"server": "https://host:6443",
                                "certificate-authority": "ca.crt"}))
    assert join.from_kubeconfig_file(str(path)) == join.JoinEndpoint("https://host:6443",
                                                                     CA_DATA)
    assert join.from_kubeconfig_file(str(tmp_path / "missing")) is None


def test_kubeadms_cluster_info() -> None:
    config_map = {"data": {"kubeconfig": yaml.safe_dump({"clusters": [{"name": "", "cluster": {
        "server": "https://host:6443", "certificate-authority-data": CA_DATA}}]})}}
    assert join.from_cluster_info(config_map) == join.JoinEndpoint("https://host:6443", CA_DATA)
    assert join.from_cluster_info(None) is None
