"""Sending a batch of emails over one SMTP connection (standard library ``smtplib``).

Security: ``starttls`` (the default: plain connection, then STARTTLS before anything else, the
certificate checked against the host name), ``tls`` (TLS from the first byte, port 465) or
``none`` (only to a loopback host: a relay on the same machine). Credentials are sent only over
TLS. Every step (connect, each command, each answer) is bounded by the timeout.

Each message gets its own result and one bad recipient never fails the batch: the server's
4xx, a refused connection or a timeout say "try again later", its 5xx "this will not work"
(an unknown mailbox, a refused login).
"""

from __future__ import annotations

import contextlib
import ipaddress
import smtplib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Literal

from app.notifications.outcomes import Outcome, Sent, bounded

Security = Literal["starttls", "tls", "none"]


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    sender: str
    port: int = 587
    security: Security = "starttls"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    # A PEM file of the CAs to trust instead of the system's (a private relay's CA).
    ca_file: str | None = None
    timeout_seconds: float = 10.0
    # The name given in EHLO; None: this machine's fully qualified name.
    local_hostname: str | None = None


@dataclass(frozen=True)
class BatchResult:
    # One per message, in order.
    results: list[Sent]
    # Set when no message could be tried (the server unreachable, TLS or the login failed):
    # the caller backs off the whole queue rather than each message.
    server_problem: str | None = None


class _ServerFailed(Exception):
    def __init__(self, sent: Sent) -> None:
        super().__init__(sent.detail)
        self.sent = sent


def settings_problem(settings: SmtpSettings) -> str | None:
    """Why these settings cannot be used (None: they can)."""
    if not settings.host:
        return "SMTP is not configured (PORTAL_SMTP_HOST)"
    if settings.security == "none" and not _loopback(settings.host):
        return ("PORTAL_SMTP_SECURITY=none is allowed only to a loopback host; use starttls "
                "or tls")
    if settings.password and not settings.username:
        return "PORTAL_SMTP_PASSWORD is set without PORTAL_SMTP_USERNAME"
    return None


def send_batch(settings: SmtpSettings, messages: Sequence[EmailMessage]) -> BatchResult:
    """Sends ``messages`` in order over one connection; never raises for a message."""
    if not messages:
        return BatchResult([])
    problem = settings_problem(settings)
    if problem:
        return _all(messages, Sent(Outcome.RETRY, problem))
    try:
        client = _connected(settings)
    except _ServerFailed as failed:
        return _all(messages, failed.sent)
    try:
        return BatchResult(_each(client, settings.sender, messages))
    finally:
        _close(client)


def _connected(settings: SmtpSettings) -> smtplib.SMTP:
    """A connection ready to send: TLS as configured, logged in when a user name is set."""
    where = f"{settings.host}:{settings.port}"
    client: smtplib.SMTP | None = None
    try:
        if settings.security == "tls":
            client = smtplib.SMTP_SSL(settings.host, settings.port, settings.local_hostname,
                                      timeout=settings.timeout_seconds,
                                      context=_tls_context(settings))
        else:
            client = smtplib.SMTP(settings.host, settings.port, settings.local_hostname,
                                  timeout=settings.timeout_seconds)
        if settings.security == "starttls":
            client.starttls(context=_tls_context(settings))
        if settings.username:
            client.login(settings.username, settings.password or "")
        return client
    except smtplib.SMTPAuthenticationError as refused:
        if client is not None:
            _close(client)
        # A wrong user name or password stays wrong until the operator changes it.
        raise _ServerFailed(_answer(refused.smtp_code, refused.smtp_error,
                                    f"the SMTP server {where} refused the login")) from None
    except smtplib.SMTPNotSupportedError as missing:
        if client is not None:
            _close(client)
        # "STARTTLS extension not supported by server", or AUTH's: the settings and the
        # server disagree until the operator changes one.
        raise _ServerFailed(Sent(Outcome.RETRY, bounded(
            f"the SMTP server {where}: {missing}"))) from None
    except smtplib.SMTPResponseException as answer:
        if client is not None:
            _close(client)
        raise _ServerFailed(_retry_answer(answer, where)) from None
    except (OSError, smtplib.SMTPException) as failure:
        if client is not None:
            _close(client)
        raise _ServerFailed(Sent(Outcome.RETRY, bounded(
            f"could not reach the SMTP server {where}: {_reason(failure)}"))) from None


def _each(client: smtplib.SMTP, sender: str, messages: Sequence[EmailMessage]) -> list[Sent]:
    results: list[Sent] = []
    for number, message in enumerate(messages):
        try:
            refused = client.send_message(message, from_addr=sender)
        except smtplib.SMTPRecipientsRefused as every:
            results.append(_worst(every.recipients))
        except smtplib.SMTPSenderRefused as sender_refused:
            results.append(_answer(sender_refused.smtp_code, sender_refused.smtp_error,
                                   f"the SMTP server refused the sender {sender}"))
        except smtplib.SMTPResponseException as answer:
            results.append(_answer(answer.smtp_code, answer.smtp_error,
                                   "the SMTP server refused the message"))
        except (OSError, smtplib.SMTPException) as lost:
            # The connection is gone: this message may or may not have arrived (it carries
            # its Message-ID for the repeat), the rest were not sent.
            detail = bounded(f"the connection to the SMTP server was lost: {_reason(lost)}")
            results.extend(Sent(Outcome.RETRY, detail) for _ in messages[number:])
            break
        else:
            results.append(Sent(Outcome.DELIVERED, _partly(refused)))
    return results


def _worst(recipients: dict[str, tuple[int, bytes]]) -> Sent:
    answers = [_answer(code, text, f"the SMTP server refused {address}")
               for address, (code, text) in recipients.items()]
    retry = [sent for sent in answers if sent.outcome is Outcome.RETRY]
    return retry[0] if retry else answers[0]


def _partly(refused: dict[str, tuple[int, bytes]]) -> str:
    if not refused:
        return ""
    return bounded("refused for " + ", ".join(
        f"{address} ({code} {_text(text)})" for address, (code, text) in refused.items()))


def _answer(code: int, text: bytes | str, what: str) -> Sent:
    """A server's answer as a result: 5xx permanent, anything else worth another try."""
    outcome = Outcome.PERMANENT if 500 <= code <= 599 else Outcome.RETRY
    return Sent(outcome, bounded(f"{what}: {code} {_text(text)}"))


def _retry_answer(answer: smtplib.SMTPResponseException, where: str) -> Sent:
    # The server's greeting, EHLO or STARTTLS answered an error: the server, not a message,
    # is the trouble, so a 5xx there is worth another try once the operator has looked.
    return Sent(Outcome.RETRY, bounded(
        f"the SMTP server {where} answered {answer.smtp_code} {_text(answer.smtp_error)}"))


def _all(messages: Sequence[EmailMessage], sent: Sent) -> BatchResult:
    return BatchResult([sent for _ in messages], server_problem=sent.detail)


def _tls_context(settings: SmtpSettings) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=settings.ca_file)


def _close(client: smtplib.SMTP) -> None:
    # QUIT is a courtesy: bounded by the socket's timeout, its failure changes no result.
    for step in (client.quit, client.close):
        with contextlib.suppress(OSError, smtplib.SMTPException):
            step()


def _loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _text(text: bytes | str) -> str:
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else text


def _reason(failure: BaseException) -> str:
    return str(failure) or type(failure).__name__
