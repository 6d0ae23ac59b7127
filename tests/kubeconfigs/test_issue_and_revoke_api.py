"""Issuing and revoking kubeconfigs over the REST API, against a real kube-apiserver standing
in for the virtual cluster (``virtual_api``, shared by the run: objects are looked up by the
test's own user ids and names)."""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from app.database.core import utcnow
from app.kit.config import DEV_ENCRYPTION_KEY
from app.kit.crypto import SecretBox
from app.kube.adapter import KubernetesAdapter
from app.kubeconfigs.manifests import service_account_name
from app.kubeconfigs.models import KubeconfigGrant
from tests.support.kube import RecordingConnector
from tests.support.kube_server import ApiServer
from tests.support.kubeconfigs import (
    Kubeconfig,
    account_username,
    bound_secret_name,
    objects_of_user,
    public_endpoint,
    real_ready_cluster,
)
from tests.support.tenancy import Tenancy, headers

# The config loaders are untyped; going through Any keeps mypy strict elsewhere.
k8s_config: Any = _k8s_config
URL = "/api/v1/tenants/acme/clusters/train/kubeconfigs"
NS = "gpu-tenant-portal"
RBAC = "rbac.authorization.k8s.io/v1"
pytestmark = pytest.mark.kube_server


def load_with_the_official_client(text: str) -> Any:
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config_from_dict(yaml.safe_load(text),
                                          client_configuration=configuration,
                                          persist_config=False)
    return configuration


def grants(db: Session) -> list[KubeconfigGrant]:
    db.expire_all()
    return list(db.scalars(select(KubeconfigGrant).order_by(KubeconfigGrant.id)))


def audit_actions(db: Session) -> list[str]:
    return list(db.scalars(select(AuditEvent.action).where(
        AuditEvent.action.like("kubeconfig.%")).order_by(AuditEvent.id)))


def test_a_member_downloads_a_one_hour_view_kubeconfig_bound_to_its_own_secret_and_revokes_it(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
    virtual: KubernetesAdapter, virtual_api: ApiServer,
) -> None:
    auth = headers(db, tenancy.acme_member)
    db.commit()
    response = client.post(URL, json={"role": "view", "lifetime_seconds": 3600}, headers=auth)

    assert response.status_code == 201, response.text
    assert response.headers["content-type"].startswith("application/yaml")
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["content-disposition"].startswith("attachment;")
    [grant] = grants(db)
    assert (grant.user_id, grant.role) == (tenancy.acme_member.id, "view")
    assert timedelta(minutes=59) < grant.expires_at - utcnow() <= timedelta(hours=1)
    issued = Kubeconfig.parse(response.text)
    claims = issued.claims()
    assert claims["sub"] == account_username(grant.service_account)
    assert claims["exp"] - claims["iat"] == 3600
    assert bound_secret_name(claims) == grant.secret_name
    assert issued.who_am_i() == account_username(grant.service_account)  # the server agrees
    secret = virtual.get("v1", "Secret", grant.secret_name, NS)
    assert secret is not None and secret["type"] == "Opaque"
    assert claims["kubernetes.io"]["secret"]["uid"] == secret["metadata"]["uid"]
    assert virtual.get("v1", "ServiceAccount", grant.service_account, NS) is not None
    binding = virtual.get(RBAC, "ClusterRoleBinding", f"gpu-tenant-portal:{grant.service_account}")
    assert binding is not None and binding["roleRef"]["name"] == "view"

    loaded = load_with_the_official_client(response.text)
    assert loaded.host == train.endpoint == public_endpoint(virtual_api) != virtual_api.url
    assert Path(loaded.ssl_ca_cert).read_bytes() == virtual_api.ca.cert_pem
    assert loaded.auth_settings()["BearerToken"]["value"] == f"Bearer {issued.token}"
    config = yaml.safe_load(response.text)
    assert [c["name"] for c in config["contexts"]] == ["acme-train-view"]
    assert train.admin_kubeconfig_encrypted is not None
    admin_yaml = SecretBox(DEV_ENCRYPTION_KEY).open(train.admin_kubeconfig_encrypted)
    admin = yaml.safe_load(admin_yaml)["users"][0]["user"]
    admin_key = base64.b64decode(admin["client-key-data"]).decode().splitlines()[1]
    for credential in (admin["client-key-data"], admin["client-certificate-data"], admin_key):
        assert credential not in response.text

    revoked = client.delete(f"{URL}/{grant.id}", headers=auth)
    assert revoked.status_code == 204
    assert virtual.get("v1", "Secret", grant.secret_name, NS) is None
    assert virtual.get("v1", "ServiceAccount", grant.service_account, NS) is None
    [grant] = grants(db)
    assert grant.revoked_at is not None and grant.secret_deleted_at is not None
    assert audit_actions(db) == ["kubeconfig.issue", "kubeconfig.revoke",
                                 "kubeconfig.secret_deleted"]
    trail = " ".join(str([e.before, e.after]) for e in db.scalars(select(AuditEvent)))
    assert issued.token not in trail
    assert client.get(URL, headers=auth).json()["items"] == []


@pytest.mark.parametrize(("body", "field"), [
    ({"role": "view", "lifetime_seconds": 599}, "lifetime_seconds"),
    ({"role": "view", "lifetime_seconds": 24 * 3600 + 1}, "lifetime_seconds"),
    ({"role": "view", "lifetime_seconds": "3600"}, "lifetime_seconds"),
    ({"role": "root"}, "role"),
])
def test_lifetimes_outside_the_bounds_and_unknown_roles_are_refused_and_nothing_is_made(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
    virtual: KubernetesAdapter, kube_calls: RecordingConnector, body: dict[str, Any],
    field: str,
) -> None:
    auth = headers(db, tenancy.acme_admin)
    db.commit()
    response = client.post(URL, json=body, headers=auth)
    assert response.status_code == 422
    assert field in [e["field"] for e in response.json()["errors"]]
    assert grants(db) == [] and kube_calls.calls == []
    assert objects_of_user(virtual, tenancy.acme_admin.id) == []


def test_the_default_lifetime_is_the_operators_and_the_minimum_is_accepted(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
) -> None:
    auth = headers(db, tenancy.acme_viewer)
    db.commit()
    issued = [client.post(URL, json=body, headers=auth) for body in ({},
                                                                    {"lifetime_seconds": 600})]
    assert [r.status_code for r in issued] == [201, 201]
    tokens = [Kubeconfig.parse(r.text) for r in issued]
    assert [t.claims()["exp"] - t.claims()["iat"] for t in tokens] == [8 * 3600, 600]
    assert [t.answers() for t in tokens] == [200, 200]
    default, shortest = grants(db)
    assert default.expires_at - default.created_at == timedelta(hours=8)
    assert default.service_account == shortest.service_account  # one per user and role
    assert default.secret_name != shortest.secret_name  # one Secret per grant
    assert [bound_secret_name(t.claims()) for t in tokens] == [default.secret_name,
                                                               shortest.secret_name]


@pytest.mark.parametrize(("who", "role", "status"), [
    ("acme_viewer", "edit", 403), ("acme_viewer", "admin", 403), ("acme_member", "admin", 403),
    ("acme_member", "edit", 201), ("acme_admin", "admin", 201), ("platform_admin", "admin", 201),
    ("globex_admin", "view", 404),
])
def test_nobody_gets_a_role_above_their_own_or_a_cluster_outside_their_tenants(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
    virtual: KubernetesAdapter, who: str, role: str, status: int,
) -> None:
    user = getattr(tenancy, who)
    auth = headers(db, user)
    db.commit()
    response = client.post(URL, json={"role": role, "lifetime_seconds": 3600}, headers=auth)
    assert response.status_code == status, response.text
    assert len(grants(db)) == (1 if status == 201 else 0)
    if status == 201:
        binding = virtual.get(RBAC, "ClusterRoleBinding",
                              f"gpu-tenant-portal:{grants(db)[0].service_account}")
        assert binding is not None
        assert binding["roleRef"]["name"] == {"admin": "cluster-admin",
                                              "edit": "gpu-tenant-portal:edit"}.get(role, role)
    else:
        assert objects_of_user(virtual, user.id) == []


def test_a_cluster_of_another_tenant_is_not_found_even_under_ones_own_tenant(
    client: TestClient, db: Session, tenancy: Tenancy, virtual_api: ApiServer,
    virtual: KubernetesAdapter, kube_calls: RecordingConnector,
) -> None:
    real_ready_cluster(db, tenancy.globex, virtual_api, name="secret-project")
    auth = headers(db, tenancy.acme_admin)
    db.commit()
    for url in ("/api/v1/tenants/acme/clusters/secret-project/kubeconfigs",
                "/api/v1/tenants/globex/clusters/secret-project/kubeconfigs"):
        assert client.post(url, json={"role": "view"}, headers=auth).status_code == 404
    assert kube_calls.calls == [] and grants(db) == []
    assert objects_of_user(virtual, tenancy.acme_admin.id) == []


def test_only_ready_clusters_issue_and_read_only_tokens_cannot(
    client: TestClient, db: Session, tenancy: Tenancy, virtual_api: ApiServer,
    virtual: KubernetesAdapter, kube_calls: RecordingConnector,
) -> None:
    real_ready_cluster(db, tenancy.acme, virtual_api, ready=False)
    member, read_only = headers(db, tenancy.acme_member), headers(db, tenancy.acme_member, "read")
    db.commit()
    assert client.post(URL, json={"role": "view"}, headers=member).status_code == 409
    assert client.post(URL, json={"role": "view"}, headers=read_only).status_code == 403
    assert kube_calls.calls == [] and grants(db) == []
    assert objects_of_user(virtual, tenancy.acme_member.id) == []


def test_members_list_their_own_grants_and_revoke_only_those_while_admins_see_and_revoke_all(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
    virtual: KubernetesAdapter,
) -> None:
    member, viewer = headers(db, tenancy.acme_member), headers(db, tenancy.acme_viewer)
    admin = headers(db, tenancy.acme_admin)
    db.commit()
    for auth in (member, viewer):
        assert client.post(URL, json={"lifetime_seconds": 3600}, headers=auth).status_code == 201
    member_grant, viewer_grant = grants(db)
    listed = client.get(URL, headers=member).json()["items"]
    assert [(g["id"], g["user_email"]) for g in listed] == [
        (member_grant.id, "acme-member@example.com")]
    assert {g["id"] for g in client.get(URL, headers=admin).json()["items"]} == {
        member_grant.id, viewer_grant.id}
    assert client.delete(f"{URL}/{viewer_grant.id}", headers=member).status_code == 403
    assert virtual.get("v1", "Secret", viewer_grant.secret_name, NS) is not None
    assert client.delete(f"{URL}/{viewer_grant.id}", headers=admin).status_code == 204
    assert client.delete(f"{URL}/{viewer_grant.id}", headers=admin).status_code == 204
    assert client.delete(f"{URL}/999999", headers=admin).status_code == 404
    assert virtual.get("v1", "Secret", viewer_grant.secret_name, NS) is None
    assert virtual.get("v1", "Secret", member_grant.secret_name, NS) is not None
    assert virtual.get("v1", "ServiceAccount",
                       service_account_name(tenancy.acme_member.id, "view"), NS) is not None
    assert audit_actions(db).count("kubeconfig.revoke") == 1
