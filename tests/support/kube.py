"""KubeConnectors for tests: in-memory fakes in place of the official client, and a recorder
of what the portal writes through a real one."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from app.kube.connector import KubeConnector
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort, Manifest


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


class RecordingPort:
    """A ``KubePort`` that passes every call on and records the writes, as (verb, kind, name).

    ``before_apply`` holds one-shot actions of someone else (another controller, an operator)
    run just before the next apply: a race between the portal's read and its write."""

    def __init__(self, inner: KubePort) -> None:
        self.inner = inner
        self.writes: list[tuple[str, str, str]] = []
        self.before_apply: list[Callable[[], object]] = []

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        while self.before_apply:
            self.before_apply.pop(0)()
        self.writes.append(("apply", obj["kind"], obj["metadata"]["name"]))
        return self.inner.apply(obj, force=force)

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> Manifest | None:
        return self.inner.get(api_version, kind, name, namespace)

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: Mapping[str, str] | None = None) -> list[Manifest]:
        return self.inner.list(api_version, kind, namespace, label_selector)

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None) -> bool:
        self.writes.append(("delete", kind, name))
        return self.inner.delete(api_version, kind, name, namespace)

    def request_token(self, namespace: str, service_account: str, *, expiration_seconds: int,
                      bound_secret: str | None) -> str:
        self.writes.append(("token", "ServiceAccount", service_account))
        return self.inner.request_token(namespace, service_account,
                                        expiration_seconds=expiration_seconds,
                                        bound_secret=bound_secret)


class RecordingConnector:
    """A ``KubeConnector`` whose host port records its writes (virtual clusters pass through)."""

    def __init__(self, inner: KubeConnector) -> None:
        self.inner = inner
        host = inner.host()
        self.port = RecordingPort(host) if host is not None else None

    def host(self) -> KubePort | None:
        return self.port

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return self.inner.virtual(kubeconfig_yaml)

    def ready(self, kubeconfig_yaml: str) -> bool:
        return self.inner.ready(kubeconfig_yaml)

    @property
    def writes(self) -> list[tuple[str, str, str]]:
        return self.port.writes if self.port is not None else []

    def forget(self) -> None:
        if self.port is not None:
            self.port.writes.clear()
