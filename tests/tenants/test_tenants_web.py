"""Tenant pages in the browser: dashboard, members and the platform admins' pages."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.gpu_classes.models import GpuClass
from app.tenants.models import Membership, Tenant
from tests import factories
from tests.support import oidc
from tests.support.web import HTML, csrf_of, htmx


def _acme_admin(db: Session, oidc_issuer: str, email: str) -> Tenant:
    acme = factories.tenant(db, "acme")
    admin = User(email=email, name="")
    db.add(admin)
    db.flush()
    factories.membership(db, acme, admin, "admin")
    db.commit()
    oidc.register_user(oidc_issuer, email)
    return acme


def test_a_tenant_admin_adds_changes_and_removes_members(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    acme = _acme_admin(db, oidc_issuer, "wes@acme.example")
    oidc.sign_in(client, "wes@acme.example")
    page = client.get("/t/acme/members", headers=HTML)
    assert page.status_code == 200 and "Add a member" in page.text
    added = client.post("/t/acme/members", data={
        "csrf_token": csrf_of(page.text), "email": "pat@acme.example", "role": "member"},
        follow_redirects=False)
    assert added.status_code == 303
    page = client.get("/t/acme/members", headers=HTML)
    assert "pat@acme.example" in page.text and "pending sign-in" in page.text
    pat = db.scalars(select(Membership).join(User).where(
        User.email == "pat@acme.example")).one()
    csrf = csrf_of(page.text)
    row = client.post(f"/t/acme/members/{pat.id}", headers=htmx(csrf), data={"role": "viewer"})
    assert row.status_code == 200 and f'id="member-{pat.id}"' in row.text
    wes = db.scalars(select(Membership).join(User).where(
        User.email == "wes@acme.example")).one()
    last = client.post(f"/t/acme/members/{wes.id}", headers=htmx(csrf), data={"role": "member"})
    assert last.status_code == 409 and "at least one admin" in last.text
    pat_id = pat.id
    gone = client.post(f"/t/acme/members/{pat_id}/remove", headers=htmx(csrf))
    assert gone.status_code == 200 and gone.text == ""
    db.expire_all()
    assert db.scalar(select(Membership.id).where(Membership.id == pat_id)) is None
    assert db.scalar(select(Membership.tenant_id).where(Membership.id == wes.id)) == acme.id


def test_an_invalid_member_form_is_shown_again_with_the_message(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    _acme_admin(db, oidc_issuer, "xan@acme.example")
    oidc.sign_in(client, "xan@acme.example")
    csrf = csrf_of(client.get("/t/acme/members", headers=HTML).text)
    response = client.post("/t/acme/members", headers=HTML, data={
        "csrf_token": csrf, "email": "nope", "role": "member"})
    assert response.status_code == 422
    assert "must be an email address" in response.text and 'value="nope"' in response.text


def test_members_and_viewers_see_the_dashboard_without_manage_buttons(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    acme = factories.tenant(db, "acme")
    viewer = User(email="yan@acme.example", name="")
    db.add(viewer)
    db.flush()
    factories.membership(db, acme, viewer, "viewer")
    db.commit()
    oidc.register_user(oidc_issuer, "yan@acme.example")
    oidc.sign_in(client, "yan@acme.example")
    dashboard = client.get("/t/acme", headers=HTML)
    assert dashboard.status_code == 200 and "Request GPU quota" not in dashboard.text
    assert "In use" in dashboard.text and "latest sample" in dashboard.text
    assert client.get("/t/acme/quota-requests/new", headers=HTML).status_code == 403
    assert client.get("/t/globex", headers=HTML).status_code == 404
    assert client.get("/admin/tenants", headers=HTML).status_code == 403


def test_anonymous_browsers_are_sent_to_sign_in(client: TestClient) -> None:
    response = client.get("/t/acme", headers=HTML, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].startswith("/auth/login")


def test_platform_admin_pages_create_suspend_and_declare(client: TestClient, db: Session) -> None:
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/admin/tenants", headers=HTML)
    assert page.status_code == 200
    csrf = csrf_of(page.text)
    bad = client.post("/admin/tenants", headers=HTML, data={
        "csrf_token": csrf, "slug": "x" * 31, "display_name": "Too long"})
    assert bad.status_code == 422 and "at most 30 characters" in bad.text
    created = client.post("/admin/tenants", data={
        "csrf_token": csrf, "slug": "umbrella", "display_name": "Umbrella"},
        follow_redirects=False)
    assert created.status_code == 303
    row = client.post("/admin/tenants/umbrella", headers=htmx(csrf), data={"state": "suspended"})
    assert row.status_code == 200 and "Reactivate" in row.text
    tenant = db.scalars(select(Tenant).where(Tenant.slug == "umbrella")).one()
    assert tenant.state == "suspended"

    classes = client.get("/admin/gpu-classes", headers=HTML)
    assert classes.status_code == 200
    declared = client.post("/admin/gpu-classes", data={
        "csrf_token": csrf, "product": "NVIDIA-L40S", "display_name": "L40S",
        "memory_mib": "46068"}, follow_redirects=False)
    assert declared.status_code == 303
    gpu = db.scalars(select(GpuClass).where(GpuClass.product == "NVIDIA-L40S")).one()
    renamed = client.post(f"/admin/gpu-classes/{gpu.id}", headers=htmx(csrf),
                          data={"display_name": "L40S 48GB"})
    assert renamed.status_code == 200 and 'value="L40S 48GB"' in renamed.text
    bad_row = client.post(f"/admin/gpu-classes/{gpu.id}", headers=htmx(csrf),
                          data={"display_name": ""})
    assert bad_row.status_code == 422 and "row-error" in bad_row.text


def test_a_bad_role_for_a_member_of_another_tenant_is_a_404(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    _acme_admin(db, oidc_issuer, "wes@acme.example")
    globex = factories.tenant(db, "globex")
    gil = factories.user(db, "gil@globex.example")
    theirs = factories.membership(db, globex, gil, "admin")
    db.commit()
    oidc.sign_in(client, "wes@acme.example")
    csrf = csrf_of(client.get("/t/acme/members", headers=HTML).text)
    for member_id in (theirs.id, 999_999):
        refused = client.post(f"/t/acme/members/{member_id}", headers=htmx(csrf),
                              data={"role": "root"})
        assert refused.status_code == 404, (member_id, refused.status_code)


def test_the_tenants_page_finds_and_pages(client: TestClient, db: Session) -> None:
    for n in range(55):
        factories.tenant(db, f"bulk-{n:02d}")
    factories.tenant(db, "umbrella", display_name="Umbrella Corp")
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    first = client.get("/admin/tenants", headers=HTML)
    assert first.text.count('<tr id="tenant-') == 50
    more = re.search(r'<a id="tenants-more" href="([^"]+)"', first.text)
    assert more
    rest = client.get(more.group(1).replace("&amp;", "&"), headers=HTML)
    assert 'id="tenant-umbrella"' in rest.text and 'id="tenants-more"' not in rest.text
    found = client.get("/admin/tenants?q=UMBRELLA", headers=HTML)
    assert found.text.count('<tr id="tenant-') == 1 and 'id="tenant-umbrella"' in found.text
    none = client.get("/admin/tenants?q=nothing-like-it", headers=HTML)
    assert "No tenant matches" in none.text
