"""The one stand-in for helm (``app.kube.helm.Installer``) of the tests and the benches."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from app.kube import simulated
from app.kube.connector import HostTarget
from app.kube.helm import AddonChart, Installer
from app.kube.memory import InMemoryKube

C = TypeVar("C")

# What a release does to its host, given (release, namespace): the chart's objects coming up
# after an install, going after an uninstall.
Release = Callable[[str, str], None]


def nothing(release: str, namespace: str) -> None:
    """A release that leaves nothing on the host."""


@dataclass
class FakeInstaller:
    """Plays helm and records every call. An install first runs ``during`` (as if helm took
    that long; what it raises ends the install unrecorded), then ``brings_up`` the chart's
    objects; an uninstall ``takes_down``. The next calls raise ``failures`` in turn (the add-on
    calls ``addon_failures``). With ``for_host``, the reconciler asks it for the installer of
    each cluster's own host."""

    brings_up: Release = nothing
    takes_down: Release = nothing
    during: Callable[[str], object] | None = None
    for_host: Callable[[HostTarget], Installer] | None = None
    failures: list[Exception] = field(default_factory=list)
    addon_failures: list[Exception] = field(default_factory=list)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)
    addon_calls: list[tuple[str, str]] = field(default_factory=list)
    addons: dict[str, AddonChart] = field(default_factory=dict)
    # Installs under way, by release; the most ever under way at once; how often a release was
    # installed while an install of it was still under way.
    running: Counter[str] = field(default_factory=Counter)
    most: int = 0
    overlaps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def install(self, release: str, namespace: str, values_yaml: str) -> None:
        with self._under_way(release):
            if self.during is not None:
                self.during(release)
            self._record(self.calls, ("install", release, namespace), self.failures)
            self.values[release] = values_yaml
            self.brings_up(release, namespace)

    def uninstall(self, release: str, namespace: str) -> None:
        self._record(self.calls, ("uninstall", release, namespace), self.failures)
        self.takes_down(release, namespace)

    def install_addon(self, addon: AddonChart, kubeconfig: str) -> None:
        self._record(self.addon_calls, ("install", addon.name), self.addon_failures)
        self.addons[addon.name] = addon

    def uninstall_addon(self, name: str, kubeconfig: str) -> None:
        self._record(self.addon_calls, ("uninstall", name), self.addon_failures)
        self.addons.pop(name, None)

    @property
    def installs(self) -> int:
        return sum(1 for call in self.calls if call[0] == "install")

    @property
    def runs(self) -> int:
        """Every helm run, the add-ons' included."""
        return len(self.calls) + len(self.addon_calls)

    def forget(self) -> None:
        """Forgets the calls so far (what is installed stays)."""
        with self.lock:
            self.calls.clear()
            self.addon_calls.clear()

    def _record(self, calls: list[C], call: C, failures: list[Exception]) -> None:
        with self.lock:
            calls.append(call)
            failure = failures.pop(0) if failures else None
        if failure is not None:
            raise failure

    @contextmanager
    def _under_way(self, release: str) -> Iterator[None]:
        with self.lock:
            self.overlaps += self.running[release] > 0
            self.running[release] += 1
            self.most = max(self.most, self.running.total())
        try:
            yield
        finally:
            with self.lock:
                self.running[release] -= 1


def vcluster_chart(kube: InMemoryKube, admin_kubeconfig: str | None) -> Release:
    """What the vCluster chart brings up on an in-memory host: the control plane's StatefulSet
    and Secret vc-<release> with ``admin_kubeconfig`` (none: the control plane never comes
    up)."""

    def bring_up(release: str, namespace: str) -> None:
        kube.seed(simulated.control_plane_statefulset(release, namespace))
        if admin_kubeconfig is not None:
            kube.seed(simulated.kubeconfig_secret(release, namespace, admin_kubeconfig))

    return bring_up


def in_memory(kube: InMemoryKube, admin_kubeconfig: str | None) -> FakeInstaller:
    """Helm with the vCluster chart on an in-memory host (``vcluster_chart``)."""

    def take_down(release: str, namespace: str) -> None:
        kube.delete("apps/v1", "StatefulSet", release, namespace)

    return FakeInstaller(brings_up=vcluster_chart(kube, admin_kubeconfig), takes_down=take_down)
