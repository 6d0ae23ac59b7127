"""Tenants over the API: platform admins create, rename, suspend and reactivate."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.http.pagination import Page
from app.tenants.models import Membership, Tenant
from app.tenants.schemas import TenantOut
from tests import factories
from tests.support.tenancy import build_tenancy, headers


def test_platform_admin_creates_a_tenant_with_its_first_admin(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    response = client.post("/api/v1/tenants", headers=headers(db, t.platform_admin), json={
        "slug": "initech", "display_name": "Initech", "admin_email": "boss@initech.example"})
    assert response.status_code == 201, response.text
    assert (response.json()["slug"], response.json()["state"]) == ("initech", "active")
    tenant = db.scalar(select(Tenant).where(Tenant.slug == "initech"))
    assert tenant is not None
    [membership] = db.scalars(select(Membership).where(Membership.tenant_id == tenant.id))
    assert membership.role == "admin"
    actions = list(db.scalars(select(AuditEvent.action).where(
        AuditEvent.tenant_id == tenant.id).order_by(AuditEvent.id)))
    assert actions == ["tenant.create", "membership.create"]


@pytest.mark.parametrize(("slug", "message"), [
    ("a" * 31, "at most 30 characters (this one has 31)"),
    ("Acme", "DNS-1123 label"),
    ("acme_corp", "DNS-1123 label"),
    ("-acme", "DNS-1123 label"),
    ("acme-", "DNS-1123 label"),
    ("", "the slug is required"),
    ("a--b", "'--' is reserved"),
    ("tenants", "reserved by the portal"),
])
def test_slugs_must_be_short_dns_labels(
    client: TestClient, db: Session, slug: str, message: str
) -> None:
    t = build_tenancy(db)
    response = client.post("/api/v1/tenants", headers=headers(db, t.platform_admin),
                           json={"slug": slug, "display_name": "X"})
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert error["field"] == "slug" and message in error["message"]


def test_a_30_character_slug_is_fine_and_a_taken_one_conflicts(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.platform_admin)
    assert client.post("/api/v1/tenants", headers=auth, json={
        "slug": "a" * 30, "display_name": "Long"}).status_code == 201
    taken = client.post("/api/v1/tenants", headers=auth, json={"slug": "acme",
                                                                "display_name": "Again"})
    assert taken.status_code == 409 and taken.json()["errors"][0]["field"] == "slug"


def test_display_names_refuse_control_characters(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    response = client.post("/api/v1/tenants", headers=headers(db, t.platform_admin),
                           json={"slug": "ok", "display_name": "Evil\nCorp"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "display_name"


def test_only_platform_admins_create_or_change_tenants(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    admin = headers(db, t.acme_admin)
    assert client.post("/api/v1/tenants", headers=admin, json={
        "slug": "mine", "display_name": "Mine"}).status_code == 403
    assert client.patch("/api/v1/tenants/acme", headers=admin,
                        json={"display_name": "Acme!"}).status_code == 403
    read_only = headers(db, t.platform_admin, "read")
    assert client.post("/api/v1/tenants", headers=read_only, json={
        "slug": "mine", "display_name": "Mine"}).status_code == 403


def test_rename_suspend_and_reactivate_are_audited_and_suspension_makes_read_only(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    pa, admin = headers(db, t.platform_admin), headers(db, t.acme_admin)
    renamed = client.patch("/api/v1/tenants/acme", headers=pa,
                           json={"display_name": "Acme Corp", "state": "suspended"})
    assert renamed.json()["display_name"] == "Acme Corp"
    assert renamed.json()["state"] == "suspended"
    assert client.get("/api/v1/tenants/acme", headers=admin).status_code == 200
    refused = client.post("/api/v1/tenants/acme/members", headers=admin,
                          json={"email": "new@example.com"})
    assert refused.status_code == 403 and "suspended" in refused.json()["detail"]
    assert client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json={
        "gpu_class_id": t.h100.id, "gpus": 1, "reason": "x"}).status_code == 403
    client.patch("/api/v1/tenants/acme", headers=pa, json={"state": "active"})
    assert client.post("/api/v1/tenants/acme/members", headers=admin,
                       json={"email": "new@example.com"}).status_code == 201
    updates = db.scalars(select(AuditEvent).where(AuditEvent.action == "tenant.update")
                         .order_by(AuditEvent.id)).all()
    assert [(u.before, u.after) for u in updates] == [
        ({"display_name": "Acme", "state": "active"},
         {"display_name": "Acme Corp", "state": "suspended"}),
        ({"display_name": "Acme Corp", "state": "suspended"},
         {"display_name": "Acme Corp", "state": "active"}),
    ]


def test_tenants_list_shows_only_what_the_caller_may_see_and_pages(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    mine = client.get("/api/v1/tenants", headers=headers(db, t.acme_viewer)).json()
    assert [(i["slug"], i["role"]) for i in mine["items"]] == [("acme", "viewer")]
    pa = headers(db, t.platform_admin)
    page = client.get("/api/v1/tenants?limit=1", headers=pa).json()
    assert len(page["items"]) == 1 and page["next_cursor"]
    rest = client.get(f"/api/v1/tenants?cursor={page['next_cursor']}", headers=pa).json()
    assert {i["slug"] for i in page["items"] + rest["items"]} >= {"acme", "globex"}
    assert client.get("/api/v1/tenants/globex", headers=headers(
        db, t.acme_admin)).status_code == 404


def test_idempotency_key_creates_one_tenant(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    auth = {**headers(db, t.platform_admin), "Idempotency-Key": "t-1"}
    body = {"slug": "once", "display_name": "Once"}
    assert client.post("/api/v1/tenants", headers=auth, json=body).status_code == 201
    replay = client.post("/api/v1/tenants", headers=auth, json=body)
    assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"
    other = client.post("/api/v1/tenants", headers=auth, json={**body, "display_name": "Two"})
    assert other.status_code == 422


def test_the_tenant_list_finds_by_slug_or_name_in_any_case(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    factories.tenant(db, "initech", display_name="Initech 100%")
    pa = headers(db, t.platform_admin)

    def found(q: str) -> list[str]:
        response = client.get("/api/v1/tenants", params={"q": q}, headers=pa)
        assert response.status_code == 200, response.text
        return [i["slug"] for i in response.json()["items"]]

    assert found("GLOB") == ["globex"]
    assert found("tech 1") == ["initech"]
    assert found("100%") == ["initech"] and found("_") == []  # wildcards are plain text
    assert client.get("/api/v1/tenants", params={"q": "acme"},
                      headers=headers(db, t.globex_admin)).json()["items"] == []


def test_the_tenant_list_answers_each_tenant_as_its_own_page_does(
    client: TestClient, db: Session
) -> None:
    """The list is encoded without FastAPI's response model; its bytes must not drift."""
    t = build_tenancy(db)
    for auth in (headers(db, t.acme_admin), headers(db, t.platform_admin)):
        listed = client.get("/api/v1/tenants", headers=auth)
        assert listed.headers["content-type"] == "application/json"
        alone = client.get("/api/v1/tenants/acme", headers=auth)
        assert alone.content in listed.content
        page = TypeAdapter(Page[TenantOut])
        assert page.dump_json(page.validate_json(listed.content)) == listed.content
