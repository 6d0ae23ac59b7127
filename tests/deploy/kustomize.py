"""Rendering the Kustomize manifests under deploy/kubernetes/ with ``kubectl kustomize``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.kube_server import tool
from tests.support.paths import ROOT

KUBERNETES = ROOT / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
EXAMPLE = KUBERNETES / "overlays" / "example"
NAMESPACE = "gpu-tenant-portal"
WORKER = "gpu-tenant-portal-worker"
WORKER_HELM = "gpu-tenant-portal-worker-helm"


def kubectl() -> str:
    """The kubectl `make tools` built (Kubernetes' own, of the suite's API server version)."""
    return str(tool("kubectl"))


def render_yaml(folder: Path) -> str:
    done = subprocess.run([kubectl(), "kustomize", str(folder)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(folder: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(render_yaml(folder)) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]
