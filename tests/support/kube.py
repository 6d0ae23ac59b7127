"""KubeConnectors for tests: in-memory fakes in place of the official client, and a recorder
of what the portal writes through a real one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from app.kube.connector import HostTarget, KubeConnector
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


class PerHostConnector:
    """In-memory (or any) clients per registered host, by host name, as the official
    connector has one per host; ``broken`` names hosts whose client cannot be built."""

    def __init__(self, ports: dict[str, KubePort], *, environment: str = "default",
                 broken: tuple[str, ...] = ()) -> None:
        self.ports = ports
        self.environment = environment
        self.broken = broken
        self.asked: list[str] = []

    def host(self) -> KubePort | None:
        return self.ports.get(self.environment)

    def for_host(self, target: HostTarget) -> KubePort | None:
        self.asked.append(target.name)
        if target.name in self.broken:
            raise ValueError("the client cannot be built")
        if target.from_environment:
            return self.host()
        return self.ports.get(target.name)

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        raise AssertionError("no virtual cluster here")

    def ready(self, kubeconfig_yaml: str) -> bool:
        return True


class Call(NamedTuple):
    """One call the portal made on a port: ``Call("apply", "Secret", name)``."""

    method: str
    kind: str
    name: str


WRITES = ("apply", "delete", "request_token")


class RecordingPort:
    """A ``KubePort`` that passes every call on and records it.

    ``before_apply`` holds one-shot actions of someone else (another controller, an operator)
    run just before the next apply: a race between the portal's read and its write."""

    def __init__(self, inner: KubePort, calls: list[Call] | None = None) -> None:
        self.inner = inner
        self.calls = calls if calls is not None else []
        self.before_apply: list[Callable[[], object]] = []

    @property
    def writes(self) -> list[Call]:
        return [call for call in self.calls if call.method in WRITES]

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        while self.before_apply:
            self.before_apply.pop(0)()
        self.calls.append(Call("apply", obj["kind"], obj["metadata"]["name"]))
        return self.inner.apply(obj, force=force)

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> Manifest | None:
        self.calls.append(Call("get", kind, name))
        return self.inner.get(api_version, kind, name, namespace)

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: Mapping[str, str] | None = None,
             field_selector: Mapping[str, str] | None = None) -> list[Manifest]:
        self.calls.append(Call("list", kind, ""))
        return self.inner.list(api_version, kind, namespace, label_selector, field_selector)

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None) -> bool:
        self.calls.append(Call("delete", kind, name))
        return self.inner.delete(api_version, kind, name, namespace)

    def request_token(self, namespace: str, service_account: str, *, expiration_seconds: int,
                      bound_secret: str | None) -> str:
        self.calls.append(Call("request_token", "ServiceAccount", service_account))
        return self.inner.request_token(namespace, service_account,
                                        expiration_seconds=expiration_seconds,
                                        bound_secret=bound_secret)


class RecordingConnector:
    """The app's connector, recording in ``calls`` what its host and virtual-cluster ports do."""

    def __init__(self, inner: KubeConnector) -> None:
        self.inner = inner
        self.calls: list[Call] = []
        host = inner.host()
        self.port = RecordingPort(host, self.calls) if host is not None else None

    def host(self) -> KubePort | None:
        return self.port

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return RecordingPort(self.inner.virtual(kubeconfig_yaml), self.calls)

    def ready(self, kubeconfig_yaml: str) -> bool:
        return self.inner.ready(kubeconfig_yaml)

    @property
    def writes(self) -> list[Call]:
        return [call for call in self.calls if call.method in WRITES]

    def forget(self) -> None:
        self.calls.clear()
