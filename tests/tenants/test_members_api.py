"""Members over the API: tenant admins add by email, change roles and remove; one admin stays."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.models import User
from tests import factories
from tests.support.tenancy import build_tenancy, headers


def _member_id(client: TestClient, auth: dict[str, str], email: str) -> int:
    items = client.get("/api/v1/tenants/acme/members", headers=auth).json()["items"]
    return int(next(m["id"] for m in items if m["email"] == email))


def test_adding_an_unknown_email_makes_a_pending_member(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    added = client.post("/api/v1/tenants/acme/members", headers=auth,
                        json={"email": "newbie@example.com", "role": "viewer"})
    assert added.status_code == 201, added.text
    assert (added.json()["role"], added.json()["pending"]) == ("viewer", True)
    user = db.scalar(select(User).where(User.email == "newbie@example.com"))
    assert user is not None and user.issuer is None and user.subject is None
    again = client.post("/api/v1/tenants/acme/members", headers=auth,
                        json={"email": "NEWBIE@example.com"})
    assert again.status_code == 409
    audit = db.scalar(select(AuditEvent).where(AuditEvent.action == "membership.create"))
    assert audit is not None and audit.after == {
        "email": "newbie@example.com", "user_id": user.id, "role": "viewer"}


def test_adding_a_known_user_binds_no_new_row(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    added = client.post("/api/v1/tenants/acme/members", headers=headers(db, t.acme_admin),
                        json={"email": t.globex_admin.email, "role": "member"})
    assert (added.json()["user_id"], added.json()["pending"]) == (t.globex_admin.id, False)


def test_an_invitation_never_lands_on_an_account_with_an_unverified_email(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    squatter = factories.user(db, "victim@example.com", email_verified=False)
    added = client.post("/api/v1/tenants/acme/members", headers=headers(db, t.acme_admin),
                        json={"email": "victim@example.com", "role": "admin"})
    assert added.status_code == 201
    assert added.json()["user_id"] != squatter.id
    assert added.json()["pending"] is True


def test_the_longest_email_the_api_takes_adds_a_member_and_makes_a_tenant(
    client: TestClient, db: Session
) -> None:
    """320 characters, the most an address may have: the pending user is named by it in full
    (their name was 200 characters wide, and such an address was a 500)."""
    t = build_tenancy(db)
    longest = "m" * 308 + "@example.com"
    added = client.post("/api/v1/tenants/acme/members", headers=headers(db, t.acme_admin),
                        json={"email": longest, "role": "viewer"})
    assert added.status_code == 201, added.text
    assert (added.json()["email"], added.json()["name"]) == (longest, longest)
    first_admin = "n" * 308 + "@example.com"
    made = client.post("/api/v1/tenants", headers=headers(db, t.platform_admin),
                       json={"slug": "wide", "display_name": "Wide", "admin_email": first_admin})
    assert made.status_code == 201, made.text
    members = client.get("/api/v1/tenants/wide/members",
                         headers=headers(db, t.platform_admin)).json()["items"]
    assert [(m["email"], m["role"]) for m in members] == [(first_admin, "admin")]


def test_bad_member_input_is_a_field_error(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    for body, field in (({"email": "not-an-email"}, "email"),
                        ({"email": "a@b.example", "role": "owner"}, "role"),
                        ({"email": "a\x00@b.example"}, "email")):
        response = client.post("/api/v1/tenants/acme/members", headers=auth, json=body)
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == field


def test_role_changes_are_audited_and_the_last_admin_stays(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    admin_id = _member_id(client, auth, t.acme_admin.email)
    demote = client.patch(f"/api/v1/tenants/acme/members/{admin_id}", headers=auth,
                          json={"role": "member"})
    assert demote.status_code == 409 and "at least one admin" in demote.json()["detail"]
    assert client.delete(f"/api/v1/tenants/acme/members/{admin_id}",
                         headers=auth).status_code == 409
    member_id = _member_id(client, auth, t.acme_member.email)
    promoted = client.patch(f"/api/v1/tenants/acme/members/{member_id}", headers=auth,
                            json={"role": "admin"})
    assert promoted.json()["role"] == "admin"
    assert client.patch(f"/api/v1/tenants/acme/members/{admin_id}", headers=auth,
                        json={"role": "viewer"}).json()["role"] == "viewer"
    change = db.scalar(select(AuditEvent).where(AuditEvent.action == "membership.update")
                       .order_by(AuditEvent.id))
    assert change is not None and (change.before, change.after) == (
        {"role": "member"}, {"role": "admin"})


def test_removal_takes_effect_on_the_next_request(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    admin, member = headers(db, t.acme_admin), headers(db, t.acme_member)
    assert client.get("/api/v1/tenants/acme", headers=member).status_code == 200
    member_id = _member_id(client, admin, t.acme_member.email)
    assert client.delete(f"/api/v1/tenants/acme/members/{member_id}",
                         headers=admin).status_code == 204
    assert client.get("/api/v1/tenants/acme", headers=member).status_code == 404
    removal = db.scalar(select(AuditEvent).where(AuditEvent.action == "membership.delete"))
    assert removal is not None and removal.before == {
        "email": t.acme_member.email, "role": "member", "user_id": t.acme_member.id}


def test_members_of_other_tenants_and_lesser_roles_are_refused(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    globex_member = factories.membership(db, t.globex, factories.user(db), "member")
    admin = headers(db, t.acme_admin)
    assert client.delete(f"/api/v1/tenants/acme/members/{globex_member.id}",
                         headers=admin).status_code == 404
    assert client.delete(f"/api/v1/tenants/globex/members/{globex_member.id}",
                         headers=admin).status_code == 404
    for user in (t.acme_member, t.acme_viewer):
        auth = headers(db, user)
        assert client.get("/api/v1/tenants/acme/members", headers=auth).status_code == 200
        assert client.post("/api/v1/tenants/acme/members", headers=auth,
                           json={"email": "x@example.com"}).status_code == 403
    read_only = headers(db, t.acme_admin, "read")
    assert client.post("/api/v1/tenants/acme/members", headers=read_only,
                       json={"email": "x@example.com"}).status_code == 403
