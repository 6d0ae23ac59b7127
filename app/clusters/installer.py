"""Installing the vCluster release: an interface, and its default on the ``helm`` CLI.

The generated values go to a private temporary file; the host kubeconfig is passed explicitly,
so helm never falls back to whatever ``~/.kube/config`` happens to say.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Protocol

from app.config import Settings
from app.kube.simulated import SimulatedHost

CHART = "vcluster"
_NOT_FOUND = ("release: not found", "not found")


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


class HelmInstaller:
    def __init__(self, *, binary: str, chart_repo: str, chart_version: str,
                 kubeconfig: str | None, timeout_seconds: float = 900.0) -> None:
        self.binary = binary
        self.chart_repo = chart_repo
        self.chart_version = chart_version
        self.kubeconfig = kubeconfig
        self.timeout_seconds = timeout_seconds

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

    def _kubeconfig_args(self) -> list[str]:
        # Without a kubeconfig the portal runs in the host cluster; helm finds in-cluster config.
        return ["--kubeconfig", self.kubeconfig] if self.kubeconfig else []

    def install(self, release: str, namespace: str, values_yaml: str) -> None:
        with tempfile.TemporaryDirectory(prefix="vcluster-values-") as directory:
            values_file = Path(directory) / "vcluster.yaml"
            values_file.write_text(values_yaml)
            values_file.chmod(0o600)
            self._run(self.install_command(release, namespace, str(values_file)))

    def uninstall(self, release: str, namespace: str) -> None:
        try:
            self._run(self.uninstall_command(release, namespace))
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
            detail = (done.stderr or done.stdout).strip()[-500:]
            raise InstallError(f"helm {command[1]} failed: {detail}")


class SimulatedInstaller:
    """Plays helm on the simulated host of ``portal dev``: the release's control plane boots
    there over a few seconds (``SimulatedHost``); nothing is installed anywhere."""

    def __init__(self, host: SimulatedHost) -> None:
        self.host = host

    def install(self, release: str, namespace: str, values_yaml: str) -> None:
        self.host.start_control_plane(release, namespace)

    def uninstall(self, release: str, namespace: str) -> None:
        self.host.stop_control_plane(release, namespace)
