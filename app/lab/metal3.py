"""Metal3's baremetal-operator as a process against a real API server: BareMetalHosts driven
through its real state machine, with its fixture provisioner in place of Ironic.

The program (``baremetal-operator``) and its CRDs come from ``make tools`` (``.cache/bin``,
``.cache/metal3-crds``). ``--test-mode`` selects the fixture provisioner: registration,
inspection (fixed hardware details) and power need no BMC, provisioning and deprovisioning
take one requeue of 10 s each. One fixture state serves every host of the process (the image
written, the power), so hosts of one operator share them. It watches one namespace, runs out of
cluster under the kubeconfig it is given, webhooks off (they would need a serving certificate
and a webhook configuration; without them a BMC address is checked by no one in test mode).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.kube.port import register_kind
from app.lab.control_plane import ApiServer, install_crds
from app.lab.ports import free_port
from app.lab.processes import terminate_all

PROGRAM = "baremetal-operator"
METAL3_API = "metal3.io/v1alpha1"
register_kind(METAL3_API, "BareMetalHost", "baremetalhosts", namespaced=True)


@dataclass
class BareMetalOperator:
    """The operator on ``server`` watching ``namespace`` (made if missing); ``stop()`` ends it
    (the server, the CRDs and the namespace stay)."""

    server: ApiServer
    workdir: Path
    namespace: str
    programs: Path = Path()
    crds: Path = Path()
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self, timeout: float = 60.0) -> BareMetalOperator:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._install()
        kubeconfig = self.server.write_admin_kubeconfig(self.workdir / "admin.kubeconfig")
        health = f"127.0.0.1:{free_port()}"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.programs / PROGRAM), "--test-mode", f"--namespace={self.namespace}",
                 f"--kubeconfig={kubeconfig}", "--webhook-port=0",
                 f"--metrics-addr=127.0.0.1:{free_port()}", f"--health-addr={health}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self._wait_ready(f"http://{health}/readyz", timeout)
        return self

    def _install(self) -> None:
        admin = self.server.adapter()
        try:
            for crd in sorted(self.crds.glob("*.yaml")):
                install_crds(admin, crd)
            admin.apply({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": self.namespace}})
        finally:
            admin.close()

    def _wait_ready(self, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.exited() is not None:
                raise RuntimeError(f"{PROGRAM} exited:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1.0, trust_env=False).is_success:
                    return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{PROGRAM} not ready within {timeout:.0f}s:\n{self.log()}")

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{PROGRAM}.log"

    def log(self, characters: int = 4000) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-characters:]

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        if self.process is not None:
            terminate_all([self.process])
