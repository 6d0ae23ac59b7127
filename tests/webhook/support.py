"""What the webhook tests share: the configuration's kind, a restricted pod, its client config."""

from __future__ import annotations

from typing import Any

from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_KIND, WEBHOOK_CONFIGURATION_NAME
from app.kube.port import KubePort

MWC = WEBHOOK_CONFIGURATION_KIND
# Pod Security "restricted", which the portal's namespaces enforce.
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
              "runAsNonRoot": True, "runAsUser": 65532,
              "seccompProfile": {"type": "RuntimeDefault"}}


def client_config(port: KubePort) -> dict[str, Any]:
    """The registered configuration's clientConfig, the same for each of its webhooks."""
    config = port.get(*MWC, WEBHOOK_CONFIGURATION_NAME)
    assert config is not None
    first: dict[str, Any] = config["webhooks"][0]["clientConfig"]
    assert all(w["clientConfig"] == first for w in config["webhooks"])
    return first
