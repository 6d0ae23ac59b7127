"""An endpoint that keeps failing is told, once, to whoever registered it: by email through a
real SMTP server, to nobody else (not the tenant's other admins, not the platform's)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.core import Database
from app.kit.config import Settings
from app.notifications.models import WebhookEndpoint
from app.reconcilers.notification_endpoints import FAILING_AFTER, FAILING_FOR
from tests import factories
from tests.notifications.endpoint_support import Worker, app_client, audit_trail, hook_settings
from tests.support.smtp import Mailbox
from tests.support.tenancy import build_tenancy, headers
from tests.support.webhook_receiver import Receiver

HOOKS = "/api/v1/tenants/acme/webhooks"


def test_a_failing_endpoint_emails_its_registrant_once_and_nobody_else(
        settings: Settings, database: Database, db: Session, tmp_path: Path,
        receiver: Receiver, mailbox: Mailbox) -> None:
    configured = hook_settings(settings, tmp_path, receiver, mailbox)
    t = build_tenancy(db)
    second_admin = factories.user(db, "acme-second-admin@example.com")
    factories.membership(db, t.acme, second_admin, "admin")
    db.commit()
    # Gone for good: every request fails and none is retried (once the worker's clock is
    # minutes ahead, the receiver answers 401 for the timestamp: as permanent).
    receiver.status = 410
    worker = Worker(configured, database)
    step = FAILING_FOR.total_seconds() / (FAILING_AFTER - 1) + 1

    with app_client(configured, database) as api:
        auth = headers(db, t.acme_admin)
        made = api.post(HOOKS, headers=auth, json={"name": "ops", "url": receiver.url})
        assert made.status_code == 201, made.text
        receiver.secrets[:] = [made.json()["secret"]]
        for attempt in range(FAILING_AFTER + 2):
            assert api.post(f"{HOOKS}/{made.json()['id']}/test", headers=auth).status_code == 202
            worker.run(after_seconds=step if attempt else 0)
            worker.run()  # the email, written with the failure, goes in the next pass
        shown = api.get(f"{HOOKS}/{made.json()['id']}", headers=auth).json()

    assert len(receiver.received) == FAILING_AFTER + 2
    assert shown["state"] == "failing" and shown["last_error"].startswith("HTTP 4")
    assert [e.action for e in audit_trail(database, "webhook_endpoint.failing")] == [
        "webhook_endpoint.failing"]
    (message,) = mailbox.messages
    assert mailbox.envelopes[0][1] == ["acme-admin@example.com"]
    assert message["Subject"] == "Webhook ops is failing"
    plain = message.get_body(("plain",))
    assert plain is not None and "HTTP 4" in plain.get_content()
    assert "/t/acme/webhooks" in plain.get_content()
    with database.session() as session:
        assert session.scalar(select(WebhookEndpoint.state)) == "failing"
