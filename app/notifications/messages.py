"""A notification written out for each channel: an email, a Slack-compatible incoming-webhook
body, a CloudEvents 1.0 event. Plain data in, plain data out: no database, no network.

Each carries the notification's uid, the same on every attempt, so that a receiver can drop a
repeat: the email as ``Message-ID: <uid@portal host>`` and ``X-Portal-Notification-Id``, the
CloudEvent as its ``id`` (the webhook's ``webhook-id`` header is added when it is signed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlsplit

import jinja2

from app.notifications.texts import KINDS, Written, written
from app.web.templating import TEMPLATES_DIR

ID_HEADER = "X-Portal-Notification-Id"
KIND_HEADER = "X-Portal-Notification-Kind"
CLOUDEVENTS_TYPE_PREFIX = "dev.gpu-tenant-portal."
CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
SLACK_CONTENT_TYPE = "application/json"
PREFERENCES_PATH = "/account/notifications"
# Slack shows at most 10 fields in a section and 50 blocks in a message.
_SLACK_FIELDS = 10
_SLACK_ITEMS = 20

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES_DIR / "notifications"),
    autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default=False),
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    keep_trailing_newline=True)


@dataclass(frozen=True)
class Event:
    """One notification as the outbox holds it."""

    uid: str
    kind: str
    payload: Mapping[str, Any]
    # When it happened (the row's creation), not when this attempt is made.
    time: datetime


@dataclass(frozen=True)
class WebhookBody:
    content_type: str
    body: bytes


def link(base_url: str, payload: Mapping[str, Any]) -> str:
    """The page the notification is about: the portal's address and the payload's path, or the
    portal's home page when the payload has no usable path."""
    root = base_url.rstrip("/")
    path = payload.get("path")
    if (isinstance(path, str) and path.startswith("/") and not path.startswith("//")
            and "\\" not in path and path.isprintable() and " " not in path):
        return root + path
    return root + "/"


def email_message(event: Event, *, base_url: str, sender: str, recipient: str) -> EmailMessage:
    """The email to one recipient: plain text and HTML alternatives of the same words."""
    words = written(event.kind, event.payload)
    context = _context(event, words, base_url)
    message = EmailMessage()
    message["Subject"] = words.subject
    message["From"] = sender
    message["To"] = recipient
    message["Date"] = format_datetime(_utc(event.time))
    message["Message-ID"] = f"<{event.uid}@{_host(base_url)}>"
    message[ID_HEADER] = event.uid
    message[KIND_HEADER] = _kind_shown(event.kind)
    # RFC 3834: no vacation or out-of-office answers to a machine's message.
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(_render(event.kind, "txt", context))
    message.add_alternative(_render(event.kind, "html", context), subtype="html")
    return message


def slack_body(event: Event, *, base_url: str) -> WebhookBody:
    """An incoming-webhook message (Slack, and the chat tools that take its format): ``text``
    for notifications and clients without blocks, ``blocks`` for the rest."""
    words = written(event.kind, event.payload)
    url = link(base_url, event.payload)
    blocks: list[dict[str, Any]] = [{
        "type": "section",
        "text": {"type": "mrkdwn", "text": f"*{_slack(words.subject)}*\n{_slack(words.sentence)}"
                                           f"\n<{_slack(url)}|Open in the portal>"},
    }]
    if words.details:
        blocks.append({"type": "section", "fields": [
            {"type": "mrkdwn", "text": f"*{_slack(label)}*\n{_slack(text)}"}
            for label, text in words.details[:_SLACK_FIELDS]]})
    for item in words.items[:_SLACK_ITEMS]:
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": " · ".join(f"{_slack(label)}: {_slack(text)}"
                                                  for label, text in item)}]})
    hidden = len(words.items) - _SLACK_ITEMS + words.more_items
    if hidden > 0:
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"and {hidden} more"}]})
    blocks.append({"type": "context", "elements": [
        {"type": "mrkdwn", "text": f"GPU Tenant Portal · notification {_slack(event.uid)}"}]})
    body = {"text": _slack(f"{words.subject}: {words.sentence}"), "blocks": blocks}
    return WebhookBody(SLACK_CONTENT_TYPE, _json(body))


def cloudevent_body(event: Event, *, base_url: str) -> WebhookBody:
    """A CloudEvents 1.0 event in the structured JSON format: the portal as ``source``, the
    page's path as ``subject``, the kind's named fields, its summary and link as ``data``."""
    words = written(event.kind, event.payload)
    data = dict(words.data)
    data["summary"] = words.subject
    data["url"] = link(base_url, event.payload)
    envelope: dict[str, Any] = {
        "specversion": "1.0",
        "id": event.uid,
        "source": base_url.rstrip("/") or "/",
        "type": CLOUDEVENTS_TYPE_PREFIX + _kind_shown(event.kind),
        "time": _utc(event.time).isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "data": data,
    }
    subject = urlsplit(data["url"]).path
    if subject not in ("", "/"):
        envelope["subject"] = subject
    return WebhookBody(CLOUDEVENTS_CONTENT_TYPE, _json(envelope))


def _context(event: Event, words: Written, base_url: str) -> dict[str, Any]:
    return {
        "subject": words.subject,
        "sentence": words.sentence,
        "details": words.details,
        "items": words.items,
        "more_items": words.more_items,
        "link": link(base_url, event.payload),
        "preferences": base_url.rstrip("/") + PREFERENCES_PATH,
        "uid": event.uid,
    }


def _render(kind: str, extension: str, context: dict[str, Any]) -> str:
    # Only a kind of the table may name a template: an unknown one stored in a row could
    # otherwise name any file under the folder.
    names = [f"{kind}.{extension}"] if kind in KINDS else []
    template = _templates.select_template([*names, f"message.{extension}"])
    return template.render(context)


def _kind_shown(kind: str) -> str:
    kept = "".join(c for c in kind if c.isascii() and (c.isalnum() or c in "._-"))
    return kept[:40] or "unknown"


def _host(base_url: str) -> str:
    return urlsplit(base_url).hostname or "localhost"


def _utc(moment: datetime) -> datetime:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def _slack(text: str) -> str:
    """Text for Slack's mrkdwn: its three control characters escaped, so that a name can never
    become a mention (``<!channel>``) or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                      default=_json_value).encode()


def _json_value(value: object) -> str:
    if isinstance(value, datetime):
        return _utc(value).isoformat().replace("+00:00", "Z")
    return str(value)
