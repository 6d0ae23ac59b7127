"""What the webhook endpoint tests share: an app whose settings allow the test receiver's
address (and trust its CA), and the worker's notification kind on a clock the test moves."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.process.asgi import create_app
from app.reconcilers.notifications import NotificationSender
from app.reconcilers.runtime import Runtime
from app.workqueue import NOTIFICATIONS
from tests.support import smtp
from tests.support.smtp import Mailbox
from tests.support.webhook_receiver import Receiver


def loopback_resolver(host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
    """The tests' DNS: every name is the loopback address (where the receiver listens)."""
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port or 443)))]


def hook_settings(settings: Settings, tmp_path: Path, receiver: Receiver | None = None,
                  mailbox: Mailbox | None = None) -> Settings:
    changes: dict[str, Any] = {}
    if receiver is not None:
        ca_file = tmp_path / "receiver-ca.pem"
        ca_file.write_text(receiver.ca_pem)
        changes |= {"notify_webhook_allowed_networks": "127.0.0.1/32",
                    "notify_webhook_ca_file": str(ca_file)}
    if mailbox is not None:
        changes |= {"smtp_host": smtp.HOST, "smtp_port": mailbox.port,
                    "smtp_username": smtp.USERNAME, "smtp_password": smtp.PASSWORD,
                    "smtp_from": smtp.SENDER, "smtp_ca_file": str(mailbox.ca_file)}
    return settings.model_copy(update=changes)


@contextmanager
def app_client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database)) as client:
        yield client


class Worker:
    """The worker's ``notifications`` kind alone, on a clock that moves when told."""

    def __init__(self, settings: Settings, database: Database) -> None:
        self.now = utcnow()
        sender = NotificationSender(settings, database, now=self.clock,
                                    resolve=loopback_resolver)
        self.runtime = Runtime(database, [sender], clock=self.clock, identity="hooks-1")

    def clock(self) -> datetime:
        return self.now

    def run(self, after_seconds: float = 0.0) -> int:
        self.now = max(self.now, utcnow()) + timedelta(seconds=after_seconds)
        return self.runtime.run_pass([NOTIFICATIONS])


def audit_trail(database: Database, prefix: str = "webhook_endpoint.") -> list[AuditEvent]:
    with database.session() as db:
        return list(db.scalars(select(AuditEvent).where(AuditEvent.action.like(f"{prefix}%"))
                               .order_by(AuditEvent.id)))
