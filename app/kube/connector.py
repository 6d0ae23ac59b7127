"""Where the portal's Kubernetes clients come from.

``for_host(target)`` reaches one registered host cluster: its stored kubeconfig, or for the
environment's host (``HostTarget.kubeconfig_yaml is None``) PORTAL_KUBECONFIG, else in-cluster
config, else none (the embedded default runs without a cluster). Clients are cached per host
and rebuilt when the host's credentials or QPS/burst change. ``host()`` is the environment's
host, as before. ``virtual(kubeconfig)`` reaches a tenant's virtual cluster with its admin
kubeconfig. ``ready(kubeconfig)`` asks a virtual cluster's /readyz. ``probe(target)`` is a
one-attempt, short-timeout client for health checks, never cached.
Tests swap in a connector that hands out in-memory fakes or emulator-backed adapters; those that
know no per-host clients still serve the environment's host through ``for_host``/``probe``
below.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter, readyz
from app.kube.port import KubePort
from app.kube.retry import RetryPolicy

log = logging.getLogger(__name__)
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
PROBE_TIMEOUT_SECONDS = 5.0
Limits = tuple[float | None, int | None]


@dataclass(frozen=True)
class HostTarget:
    """One host cluster as the connector needs it; built (decrypting) by the hosts service.

    ``kubeconfig_yaml`` None means the environment's credentials. It is kept out of repr, so
    a target in a log line or a traceback shows no secret."""

    host_id: int
    name: str
    kubeconfig_yaml: str | None = field(default=None, repr=False)
    qps: float | None = None
    burst: int | None = None
    # Where this host's API server reaches the admission webhook (not a secret; not used to
    # build the client, so not part of the fingerprint).
    webhook_url: str | None = None

    @property
    def from_environment(self) -> bool:
        return self.kubeconfig_yaml is None

    def fingerprint(self) -> str:
        """Changes when what the client is built from changes."""
        material = f"{self.kubeconfig_yaml or ''}\0{self.qps}\0{self.burst}"
        return hashlib.sha256(material.encode()).hexdigest()


class KubeConnector(Protocol):
    def host(self) -> KubePort | None: ...

    def virtual(self, kubeconfig_yaml: str) -> KubePort: ...

    def ready(self, kubeconfig_yaml: str) -> bool: ...


class PerHostConnector(KubeConnector, Protocol):
    def for_host(self, target: HostTarget) -> KubePort | None: ...

    def probe(self, target: HostTarget) -> KubePort | None: ...


def for_host(connector: KubeConnector, target: HostTarget) -> KubePort | None:
    """The host's client; a connector without per-host clients serves only the environment's
    host (None for the others: they are not reachable through it)."""
    per_host = getattr(connector, "for_host", None)
    if per_host is not None:
        port: KubePort | None = per_host(target)
        return port
    return connector.host() if target.from_environment else None


def probe(connector: KubeConnector, target: HostTarget) -> KubePort | None:
    """A client for health checks: one attempt per call, short timeout."""
    probing = getattr(connector, "probe", None)
    if probing is not None:
        port: KubePort | None = probing(target)
        return port
    return for_host(connector, target)


def kubeconfig_problem(kubeconfig_yaml: str) -> str | None:
    """Why the official client cannot be built from a kubeconfig (None when it can). Names only
    the kind of failure: the text may hold a secret."""
    try:
        KubernetesAdapter.from_kubeconfig_yaml(kubeconfig_yaml).close()
    except Exception as error:  # the loader raises many kinds, all meaning "unusable"
        return f"the Kubernetes client cannot use it ({type(error).__name__})"
    return None


def real_host_configured(settings: Settings) -> bool:
    """Whether the official client would find a host: a kubeconfig, or in-cluster config."""
    return bool(settings.kubeconfig) or _in_cluster()


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and IN_CLUSTER_TOKEN.exists()


class ClientConnector:
    """The official client: one adapter per host, shared by threads; virtual-cluster adapters
    on demand."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        # keyed by the (qps, burst) it was built with; None, None: the settings'
        self._environment: tuple[Limits, KubernetesAdapter | None] | None = None
        self._hosts: dict[int, tuple[str, KubernetesAdapter]] = {}

    def host(self) -> KubePort | None:
        """The environment's host, with the QPS/burst it was last asked for."""
        with self._lock:
            if self._environment is None:
                self._environment = ((None, None), self._environment_adapter(None, None))
            return self._environment[1]

    def for_host(self, target: HostTarget) -> KubePort | None:
        if target.kubeconfig_yaml is None:
            return self._for_environment(target)
        fingerprint = target.fingerprint()
        with self._lock:
            cached = self._hosts.get(target.host_id)
            if cached is not None and cached[0] == fingerprint:
                return cached[1]
            adapter = KubernetesAdapter.from_kubeconfig_yaml(
                target.kubeconfig_yaml, **self._options(target.qps, target.burst))
            self._hosts[target.host_id] = (fingerprint, adapter)
        if cached is not None:
            log.info("host cluster %s: credentials or limits changed, new client", target.name)
        return adapter

    def probe(self, target: HostTarget) -> KubePort | None:
        options: dict[str, Any] = {"retry": RetryPolicy(attempts=1),
                                   "timeout_seconds": PROBE_TIMEOUT_SECONDS}
        if target.kubeconfig_yaml is not None:
            return KubernetesAdapter.from_kubeconfig_yaml(target.kubeconfig_yaml, **options)
        if self.settings.kubeconfig:
            return KubernetesAdapter.from_kubeconfig(self.settings.kubeconfig, **options)
        if _in_cluster():
            return KubernetesAdapter.from_in_cluster(**options)
        return None

    def forget(self, host_id: int) -> None:
        """Drop a deleted host's client."""
        with self._lock:
            self._hosts.pop(host_id, None)

    def _for_environment(self, target: HostTarget) -> KubePort | None:
        limits = (target.qps, target.burst)
        with self._lock:
            if self._environment is None or self._environment[0] != limits:
                self._environment = (limits, self._environment_adapter(*limits))
            return self._environment[1]

    def _options(self, qps: float | None, burst: int | None) -> dict[str, Any]:
        return {
            "qps": qps or self.settings.kube_qps, "burst": burst or self.settings.kube_burst,
            # the worker's threads, and a few for the web process's requests
            "connections": self.settings.worker_concurrency + 4,
        }

    def _environment_adapter(self, qps: float | None,
                             burst: int | None) -> KubernetesAdapter | None:
        options = self._options(qps, burst)
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
