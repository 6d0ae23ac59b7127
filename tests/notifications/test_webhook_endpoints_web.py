"""The webhook pages: a tenant admin's /t/{slug}/webhooks and the platform admins'
/admin/webhooks. Adding shows the secret once; a test is sent from the page; a failing endpoint
says since when and why."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.notifications.models import WebhookEndpoint
from tests import factories
from tests.conftest import ADMIN_GROUP
from tests.notifications.endpoint_support import Worker, app_client, audit_trail
from tests.support import oidc
from tests.support.tenancy import signed_in_admin_of
from tests.support.web import HTML, csrf_of, htmx
from tests.support.webhook_receiver import Receiver

SECRET = re.compile(r"whsec_[A-Za-z0-9+/=]+")


@pytest.fixture
def pages(hooked: Settings, database: Database) -> Iterator[TestClient]:
    with app_client(hooked, database) as client:
        yield client


def _add(pages: TestClient, path: str, url: str, **fields: str) -> str:
    page = pages.get(path, headers=HTML)
    assert page.status_code == 200 and "Add a webhook" in page.text
    added = pages.post(path, data={"csrf_token": csrf_of(page.text), "name": "ops", "url": url,
                                   "format": "cloudevents", **fields})
    assert added.status_code == 201, added.text[:500]
    (secret,) = SECRET.findall(added.text)
    return str(secret)


def test_a_tenant_admin_adds_a_webhook_sees_its_secret_once_and_sends_a_test(
        pages: TestClient, db: Session, database: Database, oidc_issuer: str,
        hooked: Settings, receiver: Receiver) -> None:
    acme = factories.tenant(db, "acme")
    signed_in_admin_of(pages, db, oidc_issuer, acme)
    assert 'href="/t/acme/webhooks"' in pages.get("/t/acme", headers=HTML).text

    secret = _add(pages, "/t/acme/webhooks", receiver.url, **{"kind.cluster.ready": "on"})
    receiver.secrets[:] = [secret]
    page = pages.get("/t/acme/webhooks", headers=HTML)
    assert "ops" in page.text and receiver.url in page.text and "Cluster ready" in page.text
    assert "whsec_" not in page.text
    hook = db.scalars(select(WebhookEndpoint.id)).one()

    sent = pages.post(f"/t/acme/webhooks/{hook}/test", headers=htmx(csrf_of(page.text)))
    assert sent.status_code == 200 and "<html" not in sent.text.lower()
    assert "Test sent" in sent.headers["HX-Trigger"]
    Worker(hooked, database).run()
    assert [(r.refused, r.status) for r in receiver.received] == [(None, 200)]
    shown = pages.get("/t/acme/webhooks", headers=HTML).text
    assert "Recent deliveries" in shown and "delivered" in shown

    rolled = pages.post(f"/t/acme/webhooks/{hook}/roll-secret",
                        data={"csrf_token": csrf_of(shown)})
    (new,) = SECRET.findall(rolled.text)
    assert new != secret and "the previous secret signs too" in rolled.text
    assert "whsec_" not in pages.get("/t/acme/webhooks", headers=HTML).text

    deleted = pages.post(f"/t/acme/webhooks/{hook}/delete", data={"csrf_token": csrf_of(shown)},
                         follow_redirects=False)
    assert deleted.status_code == 303 and deleted.headers["location"] == "/t/acme/webhooks"
    assert "No webhook endpoint yet" in pages.get("/t/acme/webhooks", headers=HTML).text
    assert [e.action for e in audit_trail(database)] == [
        "webhook_endpoint.create", "webhook_endpoint.test", "webhook_endpoint.roll_secret",
        "webhook_endpoint.delete"]


def test_a_refused_address_is_told_beside_the_field(
        pages: TestClient, db: Session, oidc_issuer: str) -> None:
    signed_in_admin_of(pages, db, oidc_issuer, factories.tenant(db, "acme"))
    page = pages.get("/t/acme/webhooks", headers=HTML)
    refused = pages.post("/t/acme/webhooks", headers=htmx(csrf_of(page.text)),
                         data={"name": "ops", "url": "https://169.254.169.254/"})
    assert refused.status_code == 422 and "<html" not in refused.text.lower()
    assert "169.254.169.254 is the cloud metadata address" in refused.text
    assert 'value="https://169.254.169.254/"' in refused.text


def test_a_failing_endpoint_shows_since_when_and_its_last_error(
        pages: TestClient, db: Session, oidc_issuer: str) -> None:
    acme = factories.tenant(db, "acme")
    signed_in_admin_of(pages, db, oidc_issuer, acme)
    since = utcnow() - timedelta(minutes=20)
    db.add(WebhookEndpoint(tenant_id=acme.id, name="flaky", url="https://93.184.216.34/",
                           format="slack", secret_sealed="x", state="failing",
                           failing_since=since, consecutive_failures=7,
                           last_error="HTTP 503: upstream down"))
    db.commit()
    page = pages.get("/t/acme/webhooks", headers=HTML).text
    assert f"Failing since {since:%Y-%m-%d %H:%M} UTC" in page
    assert "HTTP 503: upstream down" in page


def test_members_of_the_tenant_who_are_not_admins_may_not_see_the_page(
        pages: TestClient, db: Session, oidc_issuer: str) -> None:
    acme = factories.tenant(db, "acme")
    member = User(email="mo@acme.example", name="")
    db.add(member)
    db.flush()
    factories.membership(db, acme, member, "member")
    factories.tenant(db, "globex")
    db.commit()
    oidc.register_user(oidc_issuer, member.email)
    oidc.sign_in(pages, member.email)
    assert pages.get("/t/acme/webhooks", headers=HTML).status_code == 403
    assert pages.get("/t/globex/webhooks", headers=HTML).status_code == 404
    assert pages.get("/admin/webhooks", headers=HTML).status_code == 403


def test_a_platform_admin_manages_the_platforms_webhooks_from_the_admin_menu(
        pages: TestClient, db: Session, oidc_issuer: str, receiver: Receiver) -> None:
    oidc.register_user(oidc_issuer, "root@example.com", groups=[ADMIN_GROUP])
    oidc.sign_in(pages, "root@example.com")
    assert 'href="/admin/webhooks"' in pages.get("/", headers=HTML).text
    _add(pages, "/admin/webhooks", receiver.url, **{"kind.host.unreachable": "on"})
    page = pages.get("/admin/webhooks", headers=HTML)
    assert "Host unreachable" in page.text and "Cluster ready" not in page.text
    hook = db.scalars(select(WebhookEndpoint).where(WebhookEndpoint.tenant_id.is_(None))).one()
    assert hook.kinds == ["host.unreachable"]
    switched = pages.post(f"/admin/webhooks/{hook.id}", headers=htmx(csrf_of(page.text)),
                          data={"disabled": "true"})
    assert switched.status_code == 200 and "disabled" in switched.text
    assert db.scalar(select(WebhookEndpoint.disabled).where(
        WebhookEndpoint.id == hook.id)) is True
