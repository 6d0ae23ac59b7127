"""What a walk on the lab is made of: the teams and their workloads, the report of its checks,
and kubectl as a team runs it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.kube.manifests.names import host_namespace_name


@dataclass(frozen=True)
class Workload:
    """What a team applies: pods of ``gpus_each`` GPUs, and Jobs of one such pod. More than
    the cluster's GPUs hold is on purpose: those beyond must wait, never run."""

    pods: tuple[str, ...]
    gpus_each: int
    jobs: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.pods) + len(self.jobs)


@dataclass(frozen=True)
class Team:
    tenant: str
    display_name: str
    cluster: str
    product: str
    gpus: int
    placement: str
    workload: Workload

    @property
    def namespace(self) -> str:
        return host_namespace_name(self.tenant, self.cluster)

    @property
    def label(self) -> str:
        return f"{self.tenant}/{self.cluster}"

    @property
    def fits(self) -> int:
        """How many of its pods the cluster's GPUs hold at once."""
        return min(self.workload.count, self.gpus // self.workload.gpus_each)


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    def check(self, name: str, passed: bool, detail: str) -> None:
        self.checks.append(Check(name, passed, detail))
        mark = "ok  " if passed else "FAIL"
        print(f"  [{mark}] {name}: {detail}", flush=True)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]


class DemoError(RuntimeError):
    pass


@dataclass
class Kubectl:
    binary: str
    env: Mapping[str, str]

    def run(self, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run([self.binary, f"--kubeconfig={kubeconfig}", *args],
                              input=stdin, capture_output=True, text=True, timeout=60,
                              env={**os.environ, **self.env}, check=False)
        if done.returncode != 0:
            raise DemoError(f"kubectl {' '.join(args)}: {done.stderr.strip()[:400]}")
        return done.stdout

    def apply(self, kubeconfig: Path, manifests: list[dict[str, Any]]) -> None:
        self.run(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(manifests))

    def pods(self, kubeconfig: Path, *scope: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            self.run(kubeconfig, "get", "pods", "-o", "json", *scope))["items"]
        return items

    def names(self, kubeconfig: Path, kind: str) -> set[str]:
        out = self.run(kubeconfig, "get", kind, "-o", "jsonpath={.items[*].metadata.name}")
        return set(out.split())
