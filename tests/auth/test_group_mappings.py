"""IdP groups mapped to tenant roles grant and take away memberships at sign-in."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests import factories
from tests.support import oidc
from tests.support.principals import bearer


def _map(client: TestClient, db: Session, tenant: str, group: str, role: str) -> int:
    admin = factories.user(db, admin=True)
    response = client.post(f"/api/v1/tenants/{tenant}/group-mappings",
                           json={"group": group, "role": role}, headers=bearer(db, admin))
    assert response.status_code == 201, response.text
    mapping_id: int = response.json()["id"]
    return mapping_id


def test_a_mapped_group_grants_membership_at_sign_in(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    factories.tenant(db, "lab")
    _map(client, db, "lab", "lab-people", "member")
    oidc.register_user(oidc_issuer, "erin@example.com", groups=["lab-people"])
    oidc.sign_in(client, "erin@example.com")
    assert client.get("/api/v1/me").json()["memberships"] == [
        {"tenant": "lab", "role": "member"}]


def test_leaving_the_group_takes_the_membership_away(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    factories.tenant(db, "lab")
    _map(client, db, "lab", "lab-people", "viewer")
    oidc.register_user(oidc_issuer, "finn@example.com", groups=["lab-people"])
    oidc.sign_in(client, "finn@example.com")
    oidc.register_user(oidc_issuer, "finn@example.com", groups=[])
    oidc.sign_in(client, "finn@example.com")
    assert client.get("/api/v1/me").json()["memberships"] == []


def test_the_highest_mapped_role_wins_and_a_direct_membership_is_kept(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    lab = factories.tenant(db, "lab")
    other = factories.tenant(db, "other")
    _map(client, db, "lab", "readers", "viewer")
    _map(client, db, "lab", "leads", "admin")
    _map(client, db, "other", "readers", "viewer")
    direct = factories.user(db, "gina@example.com", subject=None, issuer=None)
    factories.membership(db, other, direct, "admin")
    db.commit()
    oidc.register_user(oidc_issuer, "gina@example.com", groups=["readers", "leads"])
    oidc.sign_in(client, "gina@example.com")
    memberships = client.get("/api/v1/me").json()["memberships"]
    assert {m["tenant"]: m["role"] for m in memberships} == {"lab": "admin", "other": "admin"}
    assert lab.id


def test_deleting_a_mapping_removes_the_memberships_it_granted(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    factories.tenant(db, "lab")
    mapping_id = _map(client, db, "lab", "lab-people", "member")
    oidc.register_user(oidc_issuer, "hank@example.com", groups=["lab-people"])
    oidc.sign_in(client, "hank@example.com")
    admin = factories.user(db, admin=True)
    deleted = client.delete(f"/api/v1/tenants/lab/group-mappings/{mapping_id}",
                            headers=bearer(db, admin))
    assert deleted.status_code == 204
    assert client.get("/api/v1/me").json()["memberships"] == []


def test_a_group_can_be_mapped_once_per_tenant(client: TestClient, db: Session) -> None:
    factories.tenant(db, "lab")
    _map(client, db, "lab", "lab-people", "member")
    admin = factories.user(db, admin=True)
    again = client.post("/api/v1/tenants/lab/group-mappings",
                        json={"group": "lab-people", "role": "admin"}, headers=bearer(db, admin))
    assert again.status_code == 409
