"""Where the portal's Kubernetes clients come from.

``host()`` is the host GPU cluster (PORTAL_KUBECONFIG, else in-cluster config, else none: the
embedded default runs without a cluster). ``virtual(kubeconfig)`` reaches a tenant's virtual
cluster with its admin kubeconfig. ``ready(kubeconfig)`` asks a virtual cluster's /readyz.
Tests swap in a connector that hands out in-memory fakes or emulator-backed adapters.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Protocol

from app.config import Settings
from app.kube.adapter import KubernetesAdapter, readyz
from app.kube.port import KubePort

log = logging.getLogger(__name__)
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class KubeConnector(Protocol):
    def host(self) -> KubePort | None: ...

    def virtual(self, kubeconfig_yaml: str) -> KubePort: ...

    def ready(self, kubeconfig_yaml: str) -> bool: ...


def real_host_configured(settings: Settings) -> bool:
    """Whether the official client would find a host: a kubeconfig, or in-cluster config."""
    return bool(settings.kubeconfig) or _in_cluster()


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and IN_CLUSTER_TOKEN.exists()


class ClientConnector:
    """The official client: one host adapter, shared; virtual-cluster adapters on demand."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._host: KubernetesAdapter | None = None
        self._host_loaded = False

    def host(self) -> KubePort | None:
        if not self._host_loaded:
            self._host = self._load_host()
            self._host_loaded = True
        return self._host

    def _load_host(self) -> KubernetesAdapter | None:
        options: dict[str, Any] = {
            "qps": self.settings.kube_qps, "burst": self.settings.kube_burst,
            # the worker's threads, and a few for the web process's requests
            "connections": self.settings.worker_concurrency + 4,
        }
        if self.settings.kubeconfig:
            return KubernetesAdapter.from_kubeconfig(self.settings.kubeconfig, **options)
        if _in_cluster():
            return KubernetesAdapter.from_in_cluster(**options)
        log.info("no host cluster configured (PORTAL_KUBECONFIG unset, not in a cluster)")
        return None

    def virtual(self, kubeconfig_yaml: str) -> KubePort:
        return KubernetesAdapter.from_kubeconfig_yaml(kubeconfig_yaml)

    def ready(self, kubeconfig_yaml: str) -> bool:
        return readyz(kubeconfig_yaml)
