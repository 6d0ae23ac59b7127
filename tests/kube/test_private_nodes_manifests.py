"""What a private-nodes cluster holds inside its virtual cluster
(app/kube/manifests/private_nodes.py): the bootstrap group's bindings and a machine's bootstrap
token, in the shapes vcluster start 0.30.0's API server took (issue 57's experiments E2, E3)."""

import base64
from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.kube.manifests.private_nodes import bootstrap_rbac, bootstrap_token_secret

EXPIRES = datetime(2026, 12, 6, 19, 30, tzinfo=timezone(timedelta(hours=2)))


def _data(secret: dict[str, object]) -> dict[str, str]:
    data = secret["data"]
    assert isinstance(data, dict)
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


def test_the_bootstrap_group_may_ask_for_a_certificate_and_nodes_renew_their_own() -> None:
    bindings = {b["metadata"]["name"]: (b["subjects"], b["roleRef"]) for b in bootstrap_rbac()}
    group = "rbac.authorization.k8s.io"
    assert bindings == {
        "gpu-tenant-portal:node-bootstrapper": (
            [{"apiGroup": group, "kind": "Group",
              "name": "system:bootstrappers:gpu-tenant-portal"}],
            {"apiGroup": group, "kind": "ClusterRole", "name": "system:node-bootstrapper"}),
        "gpu-tenant-portal:node-autoapprove-certificate-rotation": (
            [{"apiGroup": group, "kind": "Group", "name": "system:nodes"}],
            {"apiGroup": group, "kind": "ClusterRole",
             "name": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"}),
    }
    assert {b["kind"] for b in bootstrap_rbac()} == {"ClusterRoleBinding"}


def test_no_binding_approves_a_first_certificate() -> None:
    # The portal approves the one CSR of the machine its token was minted for (r57.md §5).
    roles = {b["roleRef"]["name"] for b in bootstrap_rbac()}
    assert "system:certificates.k8s.io:certificatesigningrequests:nodeclient" not in roles


def test_the_token_secret_authenticates_the_portal_group_until_it_expires() -> None:
    secret = bootstrap_token_secret("abc123", "0123456789abcdef", EXPIRES,
                                    "gpu-tenant-portal: joins machine m1 to cluster train")
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert secret["metadata"]["name"] == "bootstrap-token-abc123"
    assert secret["metadata"]["namespace"] == "kube-system"
    assert _data(secret) == {
        "description": "gpu-tenant-portal: joins machine m1 to cluster train",
        "token-id": "abc123",
        "token-secret": "0123456789abcdef",
        "expiration": "2026-12-06T17:30:00Z",
        "usage-bootstrap-authentication": "true",
        "auth-extra-groups": "system:bootstrappers:gpu-tenant-portal",
    }


def test_the_token_signs_nothing() -> None:
    data = _data(bootstrap_token_secret("abc123", "0123456789abcdef",
                                        datetime(2026, 1, 1, tzinfo=UTC), "d"))
    assert "usage-bootstrap-signing" not in data


@pytest.mark.parametrize(("token_id", "secret"), [
    ("ABC123", "0123456789abcdef"), ("abc12", "0123456789abcdef"), ("abc123", "short"),
    ("abc123", "0123456789abcdeF"), ("abc.23", "0123456789abcdef")])
def test_a_malformed_token_is_refused(token_id: str, secret: str) -> None:
    with pytest.raises(ValueError, match="6-character id"):
        bootstrap_token_secret(token_id, secret, EXPIRES, "d")


def test_an_expiration_without_a_timezone_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        bootstrap_token_secret("abc123", "0123456789abcdef", datetime(2026, 1, 1), "d")
