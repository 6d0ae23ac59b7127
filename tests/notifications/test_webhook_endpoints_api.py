"""Webhook endpoints over the API: a tenant's admins manage theirs, platform admins the
platform's; the URL is checked at registration; the secret is shown once and signs every
request, a rolled one's predecessor beside it while the roll overlaps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.notifications import endpoints
from app.notifications.models import WebhookEndpoint
from tests.notifications.endpoint_support import (
    Worker,
    app_client,
    audit_trail,
    loopback_resolver,
)
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.webhook_receiver import Receiver

TENANT_HOOKS = "/api/v1/tenants/acme/webhooks"
ADMIN_HOOKS = "/api/v1/admin/webhooks"


@pytest.fixture
def api(hooked: Settings, database: Database) -> Iterator[TestClient]:
    with app_client(hooked, database) as client:
        yield client


def _create(api: TestClient, auth: dict[str, str], url: str, path: str = TENANT_HOOKS,
            **fields: Any) -> dict[str, Any]:
    made = api.post(path, headers=auth, json={"name": "ops", "url": url, **fields})
    assert made.status_code == 201, made.text
    body: dict[str, Any] = made.json()
    return body


def test_a_tenant_admin_registers_a_webhook_and_a_test_reaches_it_signed(
        api: TestClient, db: Session, database: Database, hooked: Settings,
        receiver: Receiver) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    made = _create(api, auth, receiver.url, kinds=["cluster.ready", "cluster.failed"])
    secret = made["secret"]
    assert secret.startswith("whsec_")
    assert (made["state"], made["kinds"], made["created_by"]) == (
        "ok", ["cluster.ready", "cluster.failed"], "acme-admin@example.com")
    receiver.secrets[:] = [secret]

    sent = api.post(f"{TENANT_HOOKS}/{made['id']}/test", headers=auth)
    assert sent.status_code == 202, sent.text
    Worker(hooked, database).run()

    (call,) = receiver.received
    assert (call.refused, call.status, call.id) == (None, 200, sent.json()["notification_id"])
    assert json.loads(call.body)["type"] == "dev.gpu-tenant-portal.test"
    shown = api.get(f"{TENANT_HOOKS}/{made['id']}", headers=auth).json()
    assert shown["last_success_at"] is not None and shown["pending"] == 0
    assert [(d["kind"], d["state"], d["attempts"]) for d in shown["recent_deliveries"]] == [
        ("test", "delivered", 1)]
    listed = api.get(TENANT_HOOKS, headers=auth)
    assert [e["name"] for e in listed.json()] == ["ops"]
    for answer in (shown, listed.json()):
        assert secret not in json.dumps(answer) and "secret" not in answer


def test_after_a_roll_requests_carry_the_new_signature_and_the_old_one_until_the_overlap_ends(
        api: TestClient, db: Session, database: Database, hooked: Settings,
        receiver: Receiver) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    made = _create(api, auth, receiver.url)
    old = made["secret"]
    rolled = api.post(f"{TENANT_HOOKS}/{made['id']}/roll-secret", headers=auth)
    assert rolled.status_code == 200, rolled.text
    new = rolled.json()["secret"]
    assert new.startswith("whsec_") and new != old
    worker = Worker(hooked, database)

    for knows in ([new], [old]):  # a receiver that moved over, and one that has not yet
        receiver.secrets[:] = knows
        api.post(f"{TENANT_HOOKS}/{made['id']}/test", headers=auth)
        worker.run()
    assert [(r.refused, r.status) for r in receiver.received] == [(None, 200), (None, 200)]
    assert len(receiver.received[0].headers["webhook-signature"].split()) == 2

    with database.transaction() as session:  # the overlap ends
        session.execute(update(WebhookEndpoint).values(previous_until=utcnow()))
    api.post(f"{TENANT_HOOKS}/{made['id']}/test", headers=auth)
    worker.run(after_seconds=1)
    last = receiver.received[-1]
    assert last.status == 401 and len(last.headers["webhook-signature"].split()) == 1
    receiver.secrets[:] = [new]
    assert api.get(f"{TENANT_HOOKS}/{made['id']}", headers=auth).json()["state"] == "ok"


def test_every_change_is_audited_and_no_secret_reaches_the_trail(
        api: TestClient, db: Session, database: Database, receiver: Receiver) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    made = _create(api, auth, receiver.url + "?token=in-the-path")
    rolled = api.post(f"{TENANT_HOOKS}/{made['id']}/roll-secret", headers=auth).json()
    changed = api.patch(f"{TENANT_HOOKS}/{made['id']}", headers=auth,
                        json={"name": "ops-2", "disabled": True})
    assert changed.status_code == 200 and changed.json()["disabled"] is True
    assert api.post(f"{TENANT_HOOKS}/{made['id']}/test", headers=auth).status_code == 409
    api.patch(f"{TENANT_HOOKS}/{made['id']}", headers=auth, json={"disabled": False})
    assert api.post(f"{TENANT_HOOKS}/{made['id']}/test", headers=auth).status_code == 202
    assert api.delete(f"{TENANT_HOOKS}/{made['id']}", headers=auth).status_code == 204
    assert api.get(f"{TENANT_HOOKS}/{made['id']}", headers=auth).status_code == 404

    trail = audit_trail(database)
    assert [e.action for e in trail] == [
        "webhook_endpoint.create", "webhook_endpoint.roll_secret", "webhook_endpoint.update",
        "webhook_endpoint.update", "webhook_endpoint.test", "webhook_endpoint.delete"]
    assert all(e.tenant_id == t.acme.id and e.actor_id == t.acme_admin.id for e in trail)
    assert trail[2].before == {"name": "ops", "disabled": False}
    written = json.dumps([[e.before, e.after, e.target_label] for e in trail])
    for secret in (made["secret"], rolled["secret"], "in-the-path"):
        assert secret not in written


def test_a_platform_admin_manages_the_platforms_webhooks(
        api: TestClient, db: Session, receiver: Receiver) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.platform_admin)
    made = _create(api, auth, receiver.url, path=ADMIN_HOOKS, kinds=["host.unreachable"],
                   format="slack")
    assert (made["tenant"], made["format"]) == (None, "slack")
    assert [e["id"] for e in api.get(ADMIN_HOOKS, headers=auth).json()] == [made["id"]]
    assert api.post(f"{ADMIN_HOOKS}/{made['id']}/test", headers=auth).status_code == 202
    assert api.post(f"{ADMIN_HOOKS}/{made['id']}/roll-secret",
                    headers=auth).status_code == 200
    # Tenant kinds do not go to the platform's endpoints, nor the other way round.
    refused = api.patch(f"{ADMIN_HOOKS}/{made['id']}", headers=auth,
                        json={"kinds": ["cluster.ready"]})
    assert refused.status_code == 422 and "platform's webhooks" in refused.text
    assert api.get(TENANT_HOOKS, headers=auth).json() == []  # acme's are its own
    assert api.delete(f"{ADMIN_HOOKS}/{made['id']}", headers=auth).status_code == 204
    # A tenant admin has no say over the platform's.
    tenant_admin = headers(db, t.acme_admin)
    assert api.get(ADMIN_HOOKS, headers=tenant_admin).status_code == 403
    assert api.post(ADMIN_HOOKS, headers=tenant_admin,
                    json={"name": "x", "url": receiver.url}).status_code == 403


def _acme_hook(db: Session, t: Tenancy) -> int:
    row = WebhookEndpoint(tenant_id=t.acme.id, name="acme-hook", url="https://93.184.216.34/",
                          format="cloudevents", secret_sealed="sealed")
    db.add(row)
    db.flush()
    return row.id


@pytest.mark.parametrize(("method", "suffix"), [
    ("GET", ""), ("POST", ""), ("GET", "/{id}"), ("PATCH", "/{id}"), ("DELETE", "/{id}"),
    ("POST", "/{id}/test"), ("POST", "/{id}/roll-secret")])
def test_another_tenants_admin_gets_404_and_a_member_403(
        api: TestClient, db: Session, method: str, suffix: str) -> None:
    t = build_tenancy(db)
    hook = _acme_hook(db, t)
    path = TENANT_HOOKS + suffix.format(id=hook)
    body = {"name": "x", "url": "https://93.184.216.34/"} if method in ("POST", "PATCH") else None
    for caller, status in ((t.globex_admin, 404), (t.acme_member, 403), (t.acme_viewer, 403)):
        answer = api.request(method, path, headers=headers(db, caller), json=body)
        assert answer.status_code == status, (caller.email, answer.text)
    # Nor does globex's own path reach acme's endpoint.
    globex = api.get(f"/api/v1/tenants/globex/webhooks/{hook}", headers=headers(db, t.globex_admin))
    assert globex.status_code == 404


@pytest.mark.parametrize(("url", "reason"), [
    ("https://127.0.0.1/hook", "127.0.0.1 is a loopback address"),
    ("https://169.254.169.254/latest", "169.254.169.254 is the cloud metadata address"),
    ("http://example.com/hook", "the URL must start with https://"),
    ("https://hooks.internal.example/", "hooks.internal.example resolves to 10.0.0.1 is a "
                                        "private address"),
])
def test_an_address_the_portal_does_not_call_is_refused_at_registration_with_its_reason(
        client: TestClient, db: Session, monkeypatch: pytest.MonkeyPatch, url: str,
        reason: str) -> None:
    def private(host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        return [(2, 1, 6, "", ("10.0.0.1", int(port)))]

    monkeypatch.setattr(endpoints, "resolve", private)
    t = build_tenancy(db)
    refused = client.post(TENANT_HOOKS, headers=headers(db, t.acme_admin),
                          json={"name": "ops", "url": url})
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "url"
    assert reason in refused.json()["errors"][0]["message"]
    assert db.scalar(select(func.count()).select_from(WebhookEndpoint)) == 0


def test_a_name_is_checked_after_resolution_and_an_allowed_network_lets_it_through(
        api: TestClient, db: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoints, "resolve", loopback_resolver)
    t = build_tenancy(db)
    made = _create(api, headers(db, t.acme_admin), "https://receiver.example:8443/hook")
    assert made["url"] == "https://receiver.example:8443/hook"


def test_a_new_address_starts_with_a_clean_record_and_kinds_null_means_every_kind(
        api: TestClient, db: Session, receiver: Receiver) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    made = _create(api, auth, receiver.url, kinds=["cluster.ready"])
    db.execute(update(WebhookEndpoint).values(state="failing", failing_since=utcnow(),
                                              consecutive_failures=6, last_error="HTTP 503"))
    db.commit()
    moved = api.patch(f"{TENANT_HOOKS}/{made['id']}", headers=auth,
                      json={"url": receiver.url + "/v2", "kinds": None})
    assert moved.status_code == 200, moved.text
    assert (moved.json()["state"], moved.json()["last_error"], moved.json()["kinds"]) == (
        "ok", "", None)
    refused = api.patch(f"{TENANT_HOOKS}/{made['id']}", headers=auth,
                        json={"url": "https://127.0.0.2/"})
    assert refused.status_code == 422 and "loopback" in refused.text
