"""A KubeConnector for tests: in-memory fakes in place of the official client."""

from __future__ import annotations

from app.kube.memory import InMemoryKube
from app.kube.port import KubePort


class InMemoryConnector:
    def __init__(self, host: KubePort | None = None, *, ready: bool = True) -> None:
        self.host_port = host
        self.virtual_ports: dict[str, InMemoryKube] = {}
        self.is_ready = ready

    def host(self) -> KubePort | None:
        return self.host_port

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return self.virtual_ports.setdefault(kubeconfig_yaml, InMemoryKube())

    def ready(self, kubeconfig_yaml: str) -> bool:
        return self.is_ready
