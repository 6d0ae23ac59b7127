"""Where a machine joining a host cluster reaches its API server: the server and CA a kubelet
bootstraps against, read from a kubeconfig (the host's stored one, the environment's
PORTAL_KUBECONFIG file, or the cluster-info ConfigMap kubeadm publishes in kube-public)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CLUSTER_INFO_NAMESPACE = "kube-public"
CLUSTER_INFO = "cluster-info"


@dataclass(frozen=True)
class JoinEndpoint:
    server: str
    ca_data: str  # base64 of the PEM CA, as a kubeconfig's certificate-authority-data


def from_kubeconfig(text: str | None) -> JoinEndpoint | None:
    """The current context's server and inline CA; None when either is missing."""
    try:
        config = yaml.safe_load(text or "")
    except yaml.YAMLError:
        return None
    if not isinstance(config, dict):
        return None
    cluster = _current_cluster(config)
    server = str(cluster.get("server") or "")
    ca_data = str(cluster.get("certificate-authority-data") or "")
    return JoinEndpoint(server, ca_data) if server and ca_data else None


def from_kubeconfig_file(path: str) -> JoinEndpoint | None:
    """The environment's kubeconfig, its CA inline or in a file beside it."""
    try:
        text = Path(path).read_text()
        config = yaml.safe_load(text)
        ca_file = _current_cluster(config).get("certificate-authority") if isinstance(
            config, dict) else None
        if ca_file:
            ca_path = Path(path).parent / str(ca_file)
            ca_data = base64.b64encode(ca_path.read_bytes()).decode()
            server = str(_current_cluster(config).get("server") or "")
            return JoinEndpoint(server, ca_data) if server else None
    except (OSError, yaml.YAMLError):
        return None
    return from_kubeconfig(text)


def from_cluster_info(config_map: dict[str, Any] | None) -> JoinEndpoint | None:
    data = (config_map or {}).get("data") or {}
    return from_kubeconfig(data.get("kubeconfig"))


def _current_cluster(config: dict[str, Any]) -> dict[str, Any]:
    contexts = [c for c in config.get("contexts") or [] if isinstance(c, dict)]
    current = config.get("current-context")
    context = next((c.get("context") or {} for c in contexts if c.get("name") == current),
                   contexts[0].get("context") or {} if contexts else {})
    clusters = [c for c in config.get("clusters") or [] if isinstance(c, dict)]
    wanted = context.get("cluster") if isinstance(context, dict) else None
    found = next((c.get("cluster") for c in clusters if c.get("name") == wanted),
                 clusters[0].get("cluster") if len(clusters) == 1 else None)
    return found if isinstance(found, dict) else {}
