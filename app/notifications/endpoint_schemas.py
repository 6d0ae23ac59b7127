"""Shapes of webhook endpoints on the API and in forms. The signing secret appears only in
``EndpointCreated`` and ``SecretRolled``: the one answer that makes it, never again."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.kit.validation import SingleLine
from app.notifications.kinds import KINDS
from app.notifications.models import URL_MAX

Format = Literal["slack", "cloudevents"]
NAME_MAX = 100
KINDS_MAX = 40


def _known_kinds(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    unknown = [kind for kind in value if kind not in KINDS]
    if unknown:
        raise ValueError(f"unknown kind {unknown[0]!r}; the kinds are {', '.join(KINDS)}")
    return list(dict.fromkeys(value))


class EndpointCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: SingleLine = Field(min_length=1, max_length=NAME_MAX, examples=["ops-alerts"])
    url: SingleLine = Field(min_length=1, max_length=URL_MAX,
                            examples=["https://hooks.example.com/portal"],
                            description="https only; the address must be a public one")
    format: Format = Field(default="cloudevents",
                           description="`slack` (a Slack incoming webhook) or `cloudevents`")
    kinds: list[SingleLine] | None = Field(
        default=None, max_length=KINDS_MAX,
        description="the kinds of notification it receives; null: every kind of its tenant "
                    "(or of the platform)")

    _kinds = field_validator("kinds")(_known_kinds)


class EndpointUpdate(BaseModel):
    """Only the fields given change; ``kinds: null`` means every kind again."""

    model_config = ConfigDict(extra="forbid")

    name: SingleLine | None = Field(default=None, min_length=1, max_length=NAME_MAX)
    url: SingleLine | None = Field(default=None, min_length=1, max_length=URL_MAX)
    format: Format | None = None
    kinds: list[SingleLine] | None = Field(default=None, max_length=KINDS_MAX)
    disabled: bool | None = Field(default=None,
                                  description="a disabled endpoint keeps its messages for later")

    _kinds = field_validator("kinds")(_known_kinds)


class DeliveryOut(BaseModel):
    id: int
    kind: str
    state: str
    attempts: int
    created_at: datetime
    delivered_at: datetime | None
    last_error: str


class EndpointOut(BaseModel):
    id: int
    tenant: str | None = Field(description="the tenant's slug; null: the platform's")
    name: str
    url: str
    format: Format
    kinds: list[str] | None
    disabled: bool
    state: Literal["ok", "failing"]
    failing_since: datetime | None = Field(
        description="when the failures in a row began (also before the state is failing)")
    consecutive_failures: int
    last_error: str
    last_success_at: datetime | None
    created_at: datetime
    created_by: str | None = Field(description="the email of who registered it")
    previous_secret_until: datetime | None = Field(
        description="after a roll, until when the previous secret still signs too")
    pending: int
    dropped: int
    recent_deliveries: list[DeliveryOut]


class EndpointCreated(EndpointOut):
    secret: str = Field(description="the signing secret (whsec_...): shown this once only")


class SecretRolled(BaseModel):
    id: int
    secret: str = Field(description="the new signing secret (whsec_...): shown this once only")
    previous_secret_until: datetime = Field(
        description="until then requests carry a signature with the previous secret too")


class TestSent(BaseModel):
    notification_id: str = Field(description="the test message's webhook-id")
