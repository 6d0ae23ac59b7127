"""helm, the one place the portal runs it: installing the vCluster release and its add-ons
(an interface, its default on the ``helm`` CLI, and the simulated host's stand-in).

The generated values go to a private temporary file; the host kubeconfig is passed explicitly,
so helm never falls back to whatever ``~/.kube/config`` happens to say. An add-on goes into the
virtual cluster: its admin kubeconfig is written to a private temporary file for the one run.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from app.kit.config import Settings
from app.kit.metrics import HELM_INSTALL_SECONDS
from app.kube.connector import HostTarget
from app.kube.manifests import dump_yaml
from app.kube.simulated import SimulatedHost

CHART = "vcluster"
# The install durations' host label for the environment's own host (no host id known).
ENV_HOST = "env"
OCI_PREFIX = "oci://"
_NOT_FOUND = ("release: not found", "not found")
# How helm says the chart's values.schema.json refuses the values: the same values would be
# refused again, so the release waits for a change rather than being retried.
_SCHEMA_REFUSED = "don't meet the specifications of the schema"


class AddonChart(Protocol):
    """A chart installed into a virtual cluster, its release and namespace named after it."""

    @property
    def name(self) -> str: ...
    @property
    def repo(self) -> str: ...
    @property
    def chart(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def values(self) -> dict[str, Any]: ...


class InstallError(Exception):
    """The installer failed; ``reason`` is shown to the tenant in a condition."""

    def __init__(self, message: str, *, reason: str = "HelmFailed", permanent: bool = False):
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.permanent = permanent


class Installer(Protocol):
    def install(self, release: str, namespace: str, values_yaml: str) -> None:
        """Install or upgrade the release with these values (idempotent)."""
        ...

    def uninstall(self, release: str, namespace: str) -> None:
        """Remove the release; no error when it is already gone."""
        ...

    def install_addon(self, addon: AddonChart, kubeconfig: str) -> None:
        """Install or upgrade the add-on (release and namespace named after it) in the virtual
        cluster that ``kubeconfig`` reaches (idempotent)."""
        ...

    def uninstall_addon(self, name: str, kubeconfig: str) -> None:
        """Remove the add-on's release from the virtual cluster; no error when it is gone."""
        ...


class HelmInstaller:
    def __init__(self, *, binary: str, chart_repo: str, chart_version: str,
                 kubeconfig: str | None, timeout_seconds: float = 900.0,
                 kubeconfig_yaml: str | None = None, host: str = ENV_HOST) -> None:
        self.binary = binary
        self.chart_repo = chart_repo
        self.chart_version = chart_version
        self.kubeconfig = kubeconfig
        self.timeout_seconds = timeout_seconds
        # A registered host's kubeconfig: written to a private file for each run only.
        self.kubeconfig_yaml = kubeconfig_yaml
        # The host cluster's id, as the install durations are labelled.
        self.host = host

    def for_host(self, target: HostTarget) -> HelmInstaller:
        """helm against one host: the environment's kubeconfig, or the host's stored one."""
        if target.kubeconfig_yaml is None:
            return HelmInstaller(binary=self.binary, chart_repo=self.chart_repo,
                                 chart_version=self.chart_version, kubeconfig=self.kubeconfig,
                                 timeout_seconds=self.timeout_seconds,
                                 host=str(target.host_id))
        return self.for_kubeconfig_yaml(target.kubeconfig_yaml, host=str(target.host_id))

    def for_kubeconfig_yaml(self, kubeconfig_yaml: str, host: str = ENV_HOST) -> HelmInstaller:
        """The same helm against another host cluster, reached with this kubeconfig."""
        return HelmInstaller(binary=self.binary, chart_repo=self.chart_repo,
                             chart_version=self.chart_version, kubeconfig=None,
                             timeout_seconds=self.timeout_seconds,
                             kubeconfig_yaml=kubeconfig_yaml, host=host)

    @classmethod
    def from_settings(cls, settings: Settings) -> HelmInstaller:
        return cls(binary=settings.helm_binary, chart_repo=settings.vcluster_chart_repo,
                   chart_version=settings.vcluster_chart_version, kubeconfig=settings.kubeconfig)

    def install_command(self, release: str, namespace: str, values_file: str) -> list[str]:
        return [self.binary, "upgrade", "--install", release, CHART,
                "--repo", self.chart_repo, "--version", self.chart_version,
                "--namespace", namespace, "--values", values_file, *self._kubeconfig_args()]

    def uninstall_command(self, release: str, namespace: str) -> list[str]:
        return [self.binary, "uninstall", release, "--namespace", namespace,
                "--ignore-not-found", *self._kubeconfig_args()]

    def addon_install_command(self, addon: AddonChart, values_file: str,
                              kubeconfig_file: str) -> list[str]:
        # An OCI chart is named by its full reference; --repo is for index.yaml repositories.
        source = ([f"{addon.repo}/{addon.chart}"] if addon.repo.startswith(OCI_PREFIX)
                  else [addon.chart, "--repo", addon.repo])
        return [self.binary, "upgrade", "--install", addon.name, *source,
                "--version", addon.version,
                "--namespace", addon.name, "--create-namespace", "--values", values_file,
                "--kubeconfig", kubeconfig_file]

    def addon_uninstall_command(self, name: str, kubeconfig_file: str) -> list[str]:
        return [self.binary, "uninstall", name, "--namespace", name, "--ignore-not-found",
                "--kubeconfig", kubeconfig_file]

    def _kubeconfig_args(self) -> list[str]:
        # Without a kubeconfig the portal runs in the host cluster; helm finds in-cluster config.
        return ["--kubeconfig", self.kubeconfig] if self.kubeconfig else []

    @contextmanager
    def _host_kubeconfig(self, directory: str) -> Iterator[HelmInstaller]:
        """This helm with ``--kubeconfig`` naming a file, for a host known by its YAML."""
        if self.kubeconfig_yaml is None:
            yield self
            return
        path = _private_file(Path(directory) / "host.kubeconfig", self.kubeconfig_yaml)
        yield HelmInstaller(binary=self.binary, chart_repo=self.chart_repo,
                            chart_version=self.chart_version, kubeconfig=str(path),
                            timeout_seconds=self.timeout_seconds)

    def install(self, release: str, namespace: str, values_yaml: str) -> None:
        with tempfile.TemporaryDirectory(prefix="vcluster-values-") as directory, \
                self._host_kubeconfig(directory) as helm:
            values_file = Path(directory) / "vcluster.yaml"
            values_file.write_text(values_yaml)
            values_file.chmod(0o600)
            with _timed(self.host):
                self._run(helm.install_command(release, namespace, str(values_file)))

    def uninstall(self, release: str, namespace: str) -> None:
        with tempfile.TemporaryDirectory(prefix="vcluster-host-") as directory, \
                self._host_kubeconfig(directory) as helm:
            try:
                self._run(helm.uninstall_command(release, namespace))
            except InstallError as error:
                if not any(marker in error.message for marker in _NOT_FOUND):
                    raise

    def install_addon(self, addon: AddonChart, kubeconfig: str) -> None:
        with tempfile.TemporaryDirectory(prefix="vcluster-addon-") as directory:
            values_file = _private_file(Path(directory) / "values.yaml", dump_yaml(addon.values))
            config_file = _private_file(Path(directory) / "kubeconfig", kubeconfig)
            with _timed(self.host):
                self._run(self.addon_install_command(addon, str(values_file),
                                                     str(config_file)))

    def uninstall_addon(self, name: str, kubeconfig: str) -> None:
        with tempfile.TemporaryDirectory(prefix="vcluster-addon-") as directory:
            config_file = _private_file(Path(directory) / "kubeconfig", kubeconfig)
            try:
                self._run(self.addon_uninstall_command(name, str(config_file)))
            except InstallError as error:
                if not any(marker in error.message for marker in _NOT_FOUND):
                    raise

    def _run(self, command: list[str]) -> None:
        executable = shutil.which(command[0])
        if executable is None:
            raise InstallError(f"the {command[0]!r} executable is not on PATH",
                               reason="HelmNotFound", permanent=True)
        try:
            done = subprocess.run(  # noqa: S603 - fixed argv, no shell
                [executable, *command[1:]], capture_output=True, text=True,
                timeout=self.timeout_seconds, check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise InstallError(f"helm {command[1]} timed out after {error.timeout}s") from error
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()
            if _SCHEMA_REFUSED in detail:
                raise InstallError(f"the chart refused the values: {detail[-800:]}",
                                   reason="ValuesRejected", permanent=True)
            raise InstallError(f"helm {command[1]} failed: {detail[-500:]}")


@contextmanager
def _timed(host: str) -> Iterator[None]:
    """An install's duration (``portal_helm_install_duration_seconds``), failed ones too."""
    started = time.perf_counter()
    try:
        yield
    finally:
        HELM_INSTALL_SECONDS.labels(host).observe(time.perf_counter() - started)


def _private_file(path: Path, text: str) -> Path:
    path.touch(mode=0o600)
    path.write_text(text)
    return path


class SimulatedInstaller:
    """Plays helm on the simulated host of ``portal dev``: the release's control plane boots
    there over a few seconds (``SimulatedHost``); nothing is installed anywhere."""

    def __init__(self, host: SimulatedHost) -> None:
        self.host = host

    def install(self, release: str, namespace: str, values_yaml: str) -> None:
        self.host.start_control_plane(release, namespace)

    def uninstall(self, release: str, namespace: str) -> None:
        self.host.stop_control_plane(release, namespace)

    def install_addon(self, addon: AddonChart, kubeconfig: str) -> None:
        """The add-on's namespace appears in the simulated virtual cluster, labelled with the
        chart, as ``helm --create-namespace`` would leave it."""
        namespace = _addon_namespace(addon.name, addon.chart, addon.version)
        self.host.virtual(kubeconfig).apply(namespace, force=True)

    def uninstall_addon(self, name: str, kubeconfig: str) -> None:
        self.host.virtual(kubeconfig).delete("v1", "Namespace", name)


def _addon_namespace(name: str, chart: str, version: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/instance": name,
                                                  "helm.sh/chart": f"{chart}-{version}"}}}
