"""The pure builders: golden files for the objects and the kubeconfig, plus their rules.

UPDATE_GOLDEN=1 rewrites tests/kubeconfigs/golden/*.yaml from the current builders.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from app.kube.manifests import dump_yaml
from app.kubeconfigs.manifests import (
    GrantSpec,
    KubeconfigSpec,
    admin_endpoint,
    grant_objects,
    kubeconfig_yaml,
)
from tests.support.virtual_clusters import TEST_CA_DATA, admin_kubeconfig

GOLDEN = Path(__file__).parent / "golden"
EXPIRES = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)


def spec(role: str = "view") -> GrantSpec:
    return GrantSpec(grant_id=7, user_id=42, user_email="pat@acme.example", role=role,
                     secret_suffix="a1b2c3d4", expires_at=EXPIRES)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


def test_golden_grant_objects() -> None:
    check_golden("grant-objects.yaml", "---\n".join(map(dump_yaml, grant_objects(spec()))))


def test_golden_kubeconfig() -> None:
    text = kubeconfig_yaml(KubeconfigSpec(
        cluster="acme-train", context="acme-train-view",
        server="https://train.acme.vc.example.com", ca_data=TEST_CA_DATA, user="acme-train-view",
        token="header.claims.signature"))
    check_golden("kubeconfig.yaml", text)


@pytest.mark.parametrize(("role", "cluster_role"),
                         [("admin", "cluster-admin"), ("edit", "gpu-tenant-portal:edit"),
                          ("view", "view")])
def test_each_role_binds_its_cluster_role_to_its_own_service_account(
    role: str, cluster_role: str
) -> None:
    _namespace, account, binding, secret = grant_objects(spec(role))
    assert binding["roleRef"]["name"] == cluster_role
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"user-42-{role}",
                                    "namespace": "gpu-tenant-portal"}]
    assert account["metadata"]["name"] == f"user-42-{role}"
    assert secret["type"] == "Opaque" and secret["metadata"]["name"] == f"user-42-{role}-a1b2c3d4"


def test_grant_specs_refuse_unknown_roles_and_unsafe_suffixes() -> None:
    with pytest.raises(ValueError, match="role"):
        spec("owner")
    with pytest.raises(ValueError, match="suffix"):
        GrantSpec(grant_id=1, user_id=1, user_email="a@b.c", role="view",
                  secret_suffix="../x", expires_at=EXPIRES)


def test_the_admin_endpoint_comes_from_the_current_context() -> None:
    config = yaml.safe_load(admin_kubeconfig("https://one.example"))
    config["clusters"].insert(0, {"name": "other", "cluster": {"server": "https://other"}})
    assert admin_endpoint(yaml.safe_dump(config)) == ("https://one.example", TEST_CA_DATA)
    with pytest.raises(ValueError, match="no cluster"):
        admin_endpoint("apiVersion: v1\nkind: Config\n")
