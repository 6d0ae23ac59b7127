"""Webhook signatures, the Standard Webhooks scheme (standardwebhooks.com, spec 1.0.0), so that a
receiver can check each request with that project's libraries or with ten lines of its own.

Every request carries three headers:

- ``webhook-id``: the notification's uid, the same on every attempt (a receiver drops repeats
  by it);
- ``webhook-timestamp``: when this attempt was signed, in whole Unix seconds (a receiver
  refuses one more than five minutes from its clock: a captured request cannot be replayed
  later);
- ``webhook-signature``: ``v1,<base64 of HMAC-SHA256(key, "<id>.<timestamp>.<body>")>``, once
  per secret, separated by spaces: while a rolled secret's predecessor is still honoured both
  are sent, so the receiver can move to the new secret when it likes.

A secret is ``whsec_`` and the base64 of 32 random bytes; the HMAC key is those bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
SECRET_BYTES = 32
# The spec's minimum and maximum key sizes, checked for secrets the portal did not make.
_KEY_BYTES = range(24, 65)
TOLERANCE_SECONDS = 5 * 60
VERSION = "v1"

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"


class BadSignature(ValueError):
    """A request that does not verify; the message says why."""


def new_secret() -> str:
    """A fresh signing secret, ``whsec_<base64 of 32 random bytes>``."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_`` secret stands for; ValueError for anything else."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a signing secret starts with {SECRET_PREFIX}")
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error:
        raise ValueError("a signing secret is whsec_ followed by base64") from None
    if len(key) not in _KEY_BYTES:
        raise ValueError("a signing secret holds 24 to 64 bytes")
    return key


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` of ``<id>.<timestamp>.<body>`` with ``secret``'s key."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return f"{VERSION},{base64.b64encode(digest).decode()}"


def signed_headers(message_id: str, timestamp: int, body: bytes,
                   secrets_in_use: Sequence[str]) -> dict[str, str]:
    """The three headers of one attempt, signed with each secret in use (the current one
    first, then a rolled one's predecessor while it overlaps)."""
    if not secrets_in_use:
        raise ValueError("a webhook request is signed with at least one secret")
    # The signed content is split on dots by nobody, but the spec forbids them in the id so
    # that "<id>.<timestamp>" can never be read two ways.
    if "." in message_id or not message_id:
        raise ValueError("a webhook id is not empty and holds no '.'")
    return {
        ID_HEADER: message_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: " ".join(signature(s, message_id, timestamp, body)
                                   for s in secrets_in_use),
    }


def verify(secret: str, headers: Mapping[str, str], body: bytes, now: float,
           tolerance: int = TOLERANCE_SECONDS) -> str:
    """The request's id when one of its ``v1`` signatures is ``secret``'s and its timestamp is
    within ``tolerance`` seconds of ``now``; :class:`BadSignature` otherwise."""
    lowered = {name.lower(): value for name, value in headers.items()}
    message_id = lowered.get(ID_HEADER)
    stamp = lowered.get(TIMESTAMP_HEADER)
    offered = lowered.get(SIGNATURE_HEADER)
    if not message_id or not stamp or not offered:
        raise BadSignature("a webhook-id, webhook-timestamp and webhook-signature are required")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise BadSignature("webhook-timestamp is not a number of seconds") from None
    if abs(now - timestamp) > tolerance:
        raise BadSignature("webhook-timestamp is too far from now (a replay?)")
    expected = signature(secret, message_id, timestamp, body).encode()
    for candidate in offered.split(" "):
        if candidate.startswith(f"{VERSION},") and hmac.compare_digest(
                candidate.encode(), expected):
            return message_id
    raise BadSignature("no signature matches this secret")
