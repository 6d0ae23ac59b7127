"""The notification preferences page: a checkbox per kind the person can receive, the mandatory
one checked, disabled and saying it cannot be turned off; saved with a confirmation, audited;
a forged post turning the mandatory kind off is refused on the page, nothing changed."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.notifications.models import NotificationPreference
from app.notifications.preference_service import ACTION
from tests.support.tenancy import build_tenancy, signed_in_admin_of
from tests.support.web import HTML, csrf_of

PAGE = "/account/notifications"
WARNING = "cluster.deletion_announced"


def _boxes(page: str) -> dict[str, str]:
    """Each kind's checkbox tag, by kind."""
    return {m.group(1): m.group(0) for m in re.finditer(
        r'<input type="checkbox" id="email-([a-z._]+)"[^>]*>', page)}


def _choices(page: str) -> list[str]:
    return re.findall(r'<input type="hidden" name="kinds" value="([a-z._]+)">', page)


def test_a_tenant_admin_turns_a_kind_off_on_the_page_and_sees_it_saved(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    t = build_tenancy(db)
    admin = signed_in_admin_of(client, db, oidc_issuer, t.acme)

    home = client.get("/", headers=HTML)
    assert f'href="{PAGE}"' in home.text
    page = client.get(PAGE, headers=HTML)
    assert page.status_code == 200
    boxes = _boxes(page.text)
    assert "cluster.ready" in boxes and "host.unreachable" not in boxes
    assert "checked disabled" in boxes[WARNING]
    assert "cannot be turned off" in page.text
    assert WARNING not in _choices(page.text)  # a disabled box sends nothing: no choice
    assert all("checked" in tag for tag in boxes.values())

    kept = [kind for kind in _choices(page.text) if kind != "cluster.asleep"]
    saved = client.post(PAGE, headers=HTML, follow_redirects=False, data={
        "csrf_token": csrf_of(page.text), "kinds": _choices(page.text), "email": kept})
    assert saved.status_code == 303
    assert saved.headers["location"].startswith(f"{PAGE}?saved=1")
    shown = client.get(saved.headers["location"], headers=HTML)
    assert "preferences are saved" in shown.text
    after = _boxes(shown.text)
    assert "checked" not in after["cluster.asleep"] and "checked" in after["cluster.awake"]
    assert "preferences are saved" not in client.get(PAGE, headers=HTML).text

    assert db.scalars(select(NotificationPreference.kind).where(
        NotificationPreference.user_id == admin.id)).all() == ["cluster.asleep"]
    [change] = db.scalars(select(AuditEvent).where(AuditEvent.action == ACTION)).all()
    assert (change.before, change.after) == ({"cluster.asleep": True}, {"cluster.asleep": False})


def test_a_forged_post_turning_the_mandatory_kind_off_is_refused_on_the_page(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    t = build_tenancy(db)
    signed_in_admin_of(client, db, oidc_issuer, t.acme)
    page = client.get(PAGE, headers=HTML)

    refused = client.post(PAGE, headers=HTML, follow_redirects=False, data={
        "csrf_token": csrf_of(page.text), "kinds": ["cluster.asleep", WARNING],
        "email": []})
    assert refused.status_code == 422
    assert f"&#39;{WARNING}&#39;" in refused.text and "cannot be turned off" in refused.text
    assert "checked" in _boxes(refused.text)["cluster.asleep"]
    assert db.scalars(select(NotificationPreference)).all() == []
    assert db.scalars(select(AuditEvent).where(AuditEvent.action == ACTION)).all() == []


def test_without_the_csrf_token_nothing_is_saved(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    t = build_tenancy(db)
    signed_in_admin_of(client, db, oidc_issuer, t.acme)
    refused = client.post(PAGE, headers=HTML, follow_redirects=False,
                          data={"kinds": ["cluster.asleep"]})
    assert refused.status_code == 403
    assert db.scalars(select(NotificationPreference)).all() == []
