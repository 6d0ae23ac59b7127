"""What became of one attempt to deliver a notification, the same for every channel."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    DELIVERED = "delivered"
    # Worth trying again later: the receiver was down, busy or said "not now" (SMTP 4xx,
    # HTTP 408/409/425/429/5xx, a timeout, a refused connection).
    RETRY = "retry"
    # Trying again would get the same answer (SMTP 5xx, another HTTP 4xx, a redirect, an
    # address the portal does not call).
    PERMANENT = "permanent"


@dataclass(frozen=True)
class Sent:
    outcome: Outcome
    # Why, in words for the admin who registered the receiver (never a secret): the server's
    # answer, bounded.
    detail: str = ""
    # The address was refused by the outbound check (not the receiver's answer): a name may
    # resolve to a public address again, so the caller may give it a few tries.
    refused_address: bool = False


DETAIL_CHARACTERS = 300


def bounded(text: str, limit: int = DETAIL_CHARACTERS) -> str:
    """``text`` on one line, without control characters, at most ``limit`` characters."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"
