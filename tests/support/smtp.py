"""A real SMTP server for the tests: aiosmtpd (PyPI) on 127.0.0.1, as strict as a submission
server: STARTTLS before anything else (a certificate for 127.0.0.1 that the portal is given as
its CA file), AUTH only after TLS and required before MAIL. Each message received is parsed
back into an ``EmailMessage``; recipients can be refused with a chosen answer (4xx, 5xx).
"""

from __future__ import annotations

import hmac
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from app.notifications.email import SmtpSettings
from app.webhook.certificates import issue
from tests.support.waiting import HANG_SECONDS
from tests.support.web import free_port

HOST = "127.0.0.1"
USERNAME = "portal-mailer"
PASSWORD = "mailer-password-for-tests"
SENDER = "GPU Tenant Portal <portal@example.com>"


@dataclass
class Mailbox:
    """What the server accepted, and how it answers."""

    port: int
    ca_file: Path
    messages: list[EmailMessage] = field(default_factory=list)
    # (envelope sender, envelope recipients) per message
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)
    # recipient address -> the answer to its RCPT TO (e.g. "550 5.1.1 No such user")
    refuse: dict[str, str] = field(default_factory=dict)
    # recipient addresses at whose RCPT TO the server drops the connection
    hang_up_at: set[str] = field(default_factory=set)
    logins: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def settings(self, **changes: Any) -> SmtpSettings:
        """The portal's settings for this server (STARTTLS, its CA, the right password)."""
        values: dict[str, Any] = {
            "host": HOST, "port": self.port, "sender": SENDER, "security": "starttls",
            "username": USERNAME, "password": PASSWORD, "ca_file": str(self.ca_file),
            "timeout_seconds": 10.0, "local_hostname": "portal.test"}
        return SmtpSettings(**(values | changes))

    def to(self, address: str) -> list[EmailMessage]:
        with self._lock:
            return [m for m, (_, rcpt) in zip(self.messages, self.envelopes, strict=True)
                    if address in rcpt]


class _Handler:
    def __init__(self, mailbox: Mailbox) -> None:
        self.mailbox = mailbox

    async def handle_RCPT(  # noqa: N802 - aiosmtpd's hook names
            self, server: SMTP, session: Session, envelope: Envelope, address: str,
            rcpt_options: list[str]) -> str:
        if address in self.mailbox.hang_up_at and server.transport is not None:
            server.transport.close()
            return "421 4.3.0 Closing the connection"
        refusal = self.mailbox.refuse.get(address)
        if refusal:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(  # noqa: N802
            self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        parsed = BytesParser(policy=policy.default).parsebytes(content)
        assert isinstance(parsed, EmailMessage)
        with self.mailbox._lock:
            self.mailbox.messages.append(parsed)
            self.mailbox.envelopes.append((str(envelope.mail_from),
                                           [str(a) for a in envelope.rcpt_tos]))
        return "250 Message accepted for delivery"


def _authenticator(mailbox: Mailbox) -> Any:
    def authenticate(server: SMTP, session: Session, envelope: Envelope, mechanism: str,
                     auth_data: Any) -> AuthResult:
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        good = (hmac.compare_digest(auth_data.login, USERNAME.encode())
                and hmac.compare_digest(auth_data.password, PASSWORD.encode()))
        if good:
            mailbox.logins.append(auth_data.login.decode())
        return AuthResult(success=good, handled=False)
    return authenticate


@contextmanager
def smtp_server(tmp_path: Path, *, implicit_tls: bool = False,
                port: int | None = None) -> Iterator[Mailbox]:
    """A running server on 127.0.0.1 (on ``port``, else a free one) and its mailbox, stopped
    when the block ends; with ``implicit_tls`` TLS from the first byte (port 465's way)
    instead of STARTTLS."""
    certificate = issue([HOST], datetime.now(UTC), timedelta(hours=1))
    folder = tmp_path / "smtp-server"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cert.pem").write_text(certificate.cert_pem)
    (folder / "key.pem").write_text(certificate.key_pem)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    mailbox = Mailbox(port=port or free_port(HOST), ca_file=folder / "cert.pem")
    # aiosmtpd does not see TLS it did not start itself: with implicit TLS, AUTH must not
    # require it (every byte is encrypted anyway).
    tls_options: dict[str, Any] = (
        {"ssl_context": tls, "auth_require_tls": False} if implicit_tls
        else {"tls_context": tls, "require_starttls": True, "auth_require_tls": True})
    controller = Controller(
        _Handler(mailbox), hostname=HOST, port=mailbox.port, ready_timeout=HANG_SECONDS,
        server_hostname="smtp.test", auth_required=True,
        authenticator=_authenticator(mailbox), **tls_options)
    controller.start()
    try:
        yield mailbox
    finally:
        controller.stop()
