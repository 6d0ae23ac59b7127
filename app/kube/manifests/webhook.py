"""What the admission webhook needs on the host besides its configuration: its namespace and the
Secret with its serving key pair."""

import base64
from typing import Any, Final

from app.kube.manifests import labels as lbl

Manifest = dict[str, Any]
TLS_SECRET_NAME: Final = "gpu-tenant-portal-webhook-tls"  # noqa: S105 - a name
CERT_KEY: Final = "tls.crt"
PRIVATE_KEY: Final = "tls.key"
# Every certificate the API server should still trust: the current one and, during a rotation,
# the previous one.
BUNDLE_KEY: Final = "ca.crt"


def portal_namespace(name: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": lbl.managed()}}


def webhook_tls_secret(
    namespace: str,
    *,
    cert_pem: str,
    key_pem: str,
    bundle_pem: str,
    resource_version: str | None,
) -> Manifest:
    """The key pair and trust bundle. With ``resource_version`` the apply only succeeds on the
    Secret as it was read, so two workers rotating at once cannot both win."""
    metadata: Manifest = {"name": TLS_SECRET_NAME, "namespace": namespace,
                          "labels": lbl.managed()}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    data = {CERT_KEY: cert_pem, PRIVATE_KEY: key_pem, BUNDLE_KEY: bundle_pem}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "kubernetes.io/tls",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }
