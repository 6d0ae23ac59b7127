"""Per-host clients on a real kube-apiserver: one client per host, kept while its credentials
and limits stay, rebuilt when they change; the environment's host as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.kit.config import Settings
from app.kube.connector import ClientConnector, HostTarget, for_host, probe
from app.kube.errors import TransientKubeError
from app.kube.memory import InMemoryKube
from tests.support.kube import InMemoryConnector
from tests.support.kube_server import ApiServer, kubeconfig_yaml
from tests.support.web import free_port

pytestmark = pytest.mark.kube_server


def test_a_registered_host_gets_its_own_client_cached_until_its_credentials_change(
        kai_host: ApiServer, settings: Settings) -> None:
    connector = ClientConnector(settings)
    target = HostTarget(host_id=7, name="gpu-eu-2", kubeconfig_yaml=kai_host.admin_kubeconfig)
    port = connector.for_host(target)
    assert port is not None
    assert any(n["metadata"]["name"] == "default" for n in port.list("v1", "Namespace"))
    assert connector.for_host(target) is port
    faster = HostTarget(7, "gpu-eu-2", kai_host.admin_kubeconfig, qps=200.0, burst=400)
    rebuilt = connector.for_host(faster)
    assert rebuilt is not port
    assert connector.for_host(faster) is rebuilt
    other_user = HostTarget(7, "gpu-eu-2", kai_host.kubeconfig_for(
        client=kai_host.ca.client("kubernetes-admin", "system:masters")))
    assert connector.for_host(other_user) not in (port, rebuilt)


def test_the_environments_host_is_portal_kubeconfig_and_host_still_reaches_it(
        kai_host: ApiServer, settings: Settings, tmp_path: Path) -> None:
    path = kai_host.write_admin_kubeconfig(tmp_path / "host.yaml")
    connector = ClientConnector(settings.model_copy(update={"kubeconfig": str(path)}))
    environment = HostTarget(host_id=1, name="default")
    port = connector.for_host(environment)
    assert port is not None and port is connector.host()
    assert port.get("v1", "Namespace", "kube-system") is not None


def test_without_portal_kubeconfig_the_environments_host_is_none(settings: Settings) -> None:
    connector = ClientConnector(settings)
    assert connector.for_host(HostTarget(1, "default")) is None
    assert connector.probe(HostTarget(1, "default")) is None


def test_the_secret_is_not_in_a_targets_repr() -> None:
    target = HostTarget(3, "gpu-eu-2", "users: [{user: {token: s3cr3t-token}}]")
    assert "s3cr3t-token" not in repr(target)


def test_a_probe_of_a_closed_port_fails_at_once_without_retrying(
        kai_host: ApiServer, settings: Settings) -> None:
    closed = kubeconfig_yaml(f"https://127.0.0.1:{free_port()}", kai_host.ca.cert_pem,
                             token="t")
    port = ClientConnector(settings).probe(HostTarget(9, "gone", closed))
    assert port is not None
    with pytest.raises(TransientKubeError):
        port.get("v1", "Namespace", "default")


def test_connectors_without_per_host_clients_serve_only_the_environments_host() -> None:
    host = InMemoryKube()
    connector = InMemoryConnector(host)
    assert for_host(connector, HostTarget(1, "default")) is host
    assert probe(connector, HostTarget(1, "default")) is host
    assert for_host(connector, HostTarget(2, "gpu-eu-2", "kubeconfig")) is None
