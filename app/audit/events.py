"""What the audit trail announces (app.kit.hooks): every event recorded, as it is written.

Notifications connect here: an audited change is one that people may have to hear of, so
emitting one needs no edit to the service that made the change. Listeners run in the
recording transaction and must stay cheap for the many actions they ignore (no I/O).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.kit.hooks import Hook


@dataclass(frozen=True)
class Recorded:
    """An audit event as written (``after`` scrubbed of secrets)."""

    action: str
    tenant_id: int | None
    target_type: str
    target_id: str
    target_label: str
    after: dict[str, Any] | None


# Required: an outbox that no process connected would lose its notifications unnoticed.
recorded: Hook[[Session, Recorded]] = Hook("audit.recorded", required=True)
