"""What a private-nodes cluster holds inside its virtual cluster for its machines to join it
(issue 57, r57.md §5): the bootstrap group's bindings, and a machine's bootstrap token.

The group may ask for a client certificate (``system:node-bootstrapper``), and a node may renew
its own (``selfnodeclient``); no binding approves a first certificate: the machines kind
approves only the CSR of the machine its token was minted for, and denies the rest."""

from __future__ import annotations

import base64
from datetime import datetime

from app.kube.manifests import baremetal as metal3
from app.kube.manifests import labels as lbl
from app.kube.port import Manifest

BOOTSTRAP_GROUP = metal3.BOOTSTRAP_GROUP
_RBAC = "rbac.authorization.k8s.io"


def bootstrap_rbac() -> list[Manifest]:
    """The ClusterRoleBindings a kubelet's TLS bootstrap needs in the virtual cluster."""
    bindings = {
        "gpu-tenant-portal:node-bootstrapper": (BOOTSTRAP_GROUP, "system:node-bootstrapper"),
        "gpu-tenant-portal:node-autoapprove-certificate-rotation": (
            "system:nodes",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"),
    }
    return [{"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": name, "labels": lbl.managed()},
             "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": role},
             "subjects": [{"apiGroup": _RBAC, "kind": "Group", "name": group}]}
            for name, (group, role) in bindings.items()]


def bootstrap_token_secret(token_id: str, secret: str, expires_at: datetime,
                           description: str) -> Manifest:
    """A bootstrap token for authentication only (no signing usage), valid until
    ``expires_at``, in the virtual cluster's kube-system. Holds the secret: never log it."""
    token = metal3.BootstrapToken(token_id, secret)  # refuses a malformed token
    data = {"description": description, "token-id": token.token_id,
            "token-secret": token.secret, "expiration": metal3.rfc3339(expires_at),
            "usage-bootstrap-authentication": "true", "auth-extra-groups": BOOTSTRAP_GROUP}
    return {"apiVersion": "v1", "kind": "Secret", "type": metal3.BOOTSTRAP_TOKEN_TYPE,
            "metadata": {"name": metal3.bootstrap_token_secret_name(token_id),
                         "namespace": metal3.BOOTSTRAP_TOKEN_NAMESPACE,
                         "labels": lbl.managed()},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
