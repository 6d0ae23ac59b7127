"""The lab's network: a bridge on the machine and a network namespace per virtual cluster pod.

A vCluster pod's control plane listens on fixed ports (6443 its API server, 8443 the syncer's
proxy, 10257/10259 its controller-manager and scheduler): several on one machine need a network
each, as pods have. Each pod gets a namespace with a veth on the bridge and an address of the
lab's /16; the machine is the gateway there, where the host API server listens. A lab and the
test suite's lab use different names and subnets, so that both can run at once.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

PREFIX_LENGTH = 16


class NetworkError(RuntimeError):
    pass


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


@dataclass(frozen=True)
class LabNetwork:
    name: str = "plab"
    subnet: str = "10.213"

    @property
    def bridge(self) -> str:
        return f"{self.name}0"

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.0.1"

    def bring_up(self) -> None:
        """The bridge with the gateway address; what a crashed lab left is taken down first."""
        self.remove()
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/{PREFIX_LENGTH}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def remove(self) -> None:
        for namespace in self._namespaces():
            ip("netns", "del", namespace, check=False)
        ip("link", "del", self.bridge, check=False)

    def pod(self, index: int) -> PodNetwork:
        return PodNetwork(self, index)

    def _namespaces(self) -> list[str]:
        listed = ip("netns", "list", check=False).stdout.splitlines()
        return [line.split()[0] for line in listed if line.startswith(f"{self.name}-")]


@dataclass(frozen=True)
class PodNetwork:
    lab: LabNetwork
    index: int

    @property
    def namespace(self) -> str:
        return f"{self.lab.name}-{self.index}"

    @property
    def address(self) -> str:
        """x.y.1.1 and on: the gateway's /24 is left alone."""
        return f"{self.lab.subnet}.{1 + self.index // 250}.{1 + self.index % 250}"

    @property
    def _outside(self) -> str:
        return f"{self.lab.name}{self.index}h"

    def create(self) -> PodNetwork:
        self.remove()  # what a crashed runner left under the same name
        inside = f"{self.lab.name}{self.index}p"
        ip("netns", "add", self.namespace)
        ip("link", "add", self._outside, "type", "veth", "peer", "name", inside)
        ip("link", "set", inside, "netns", self.namespace)
        ip("link", "set", self._outside, "master", self.lab.bridge, "up")
        self.inside("addr", "add", f"{self.address}/{PREFIX_LENGTH}", "dev", inside)
        self.inside("link", "set", inside, "up")
        self.inside("link", "set", "lo", "up")
        self.inside("route", "add", "default", "via", self.lab.gateway)
        return self

    def inside(self, *args: str) -> None:
        ip("-n", self.namespace, *args)

    def remove(self) -> None:
        # Deleting the namespace deletes its end of the veth pair, and with it the other.
        ip("netns", "del", self.namespace, check=False)
        ip("link", "del", self._outside, check=False)

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]
