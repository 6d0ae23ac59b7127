"""Which kubelet CSR in a private-nodes cluster is a machine's: the only one the machines kind
approves (r57.md §5). No I/O."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
BOOTSTRAP_USER_PREFIX = "system:bootstrap:"


def bootstrap_token_of(csr: dict[str, Any]) -> str | None:
    """The bootstrap token id that asked for the CSR (None: not a bootstrap token)."""
    user = str((csr.get("spec") or {}).get("username") or "")
    return user[len(BOOTSTRAP_USER_PREFIX):] if user.startswith(BOOTSTRAP_USER_PREFIX) else None


def decided(csr: dict[str, Any]) -> bool:
    conditions = (csr.get("status") or {}).get("conditions") or []
    return any(c.get("type") in ("Approved", "Denied") for c in conditions)


def is_machines(csr: dict[str, Any], token_id: str, node_name: str) -> bool:
    """The CSR a kubelet bootstrapping with ``token_id`` sends for ``node_name``: asked by that
    token, for the kubelet client signer, subject CN ``system:node:<node>`` and O
    ``system:nodes`` only."""
    spec = csr.get("spec") or {}
    if bootstrap_token_of(csr) != token_id or spec.get("signerName") != KUBELET_SIGNER:
        return False
    try:
        request = x509.load_pem_x509_csr(base64.b64decode(spec.get("request") or ""))
    except (ValueError, binascii.Error):
        return False
    subject = request.subject
    names = [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    groups = [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return names == [f"system:node:{node_name}"] and groups == ["system:nodes"]
