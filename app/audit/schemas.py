from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class AuditFilters(BaseModel):
    tenant: str | None = None
    actor: str | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    # Sign-ins are many and rarely what one looks for: the page leaves them out unless asked.
    sign_ins: bool = True


class AuditEventOut(BaseModel):
    id: int
    occurred_at: datetime
    actor: str
    tenant: str | None
    action: str
    target_type: str
    target_id: str
    # What the target was called when the event happened ("" for events recorded before
    # target labels existed).
    target_label: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    request_id: str
