"""The notification preferences as the API shows and takes them."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, field_validator

from app.notifications.kinds import KINDS
from app.notifications.models import KIND_MAX
from app.notifications.preference_service import NEVER_EMAILED


class PreferenceOut(BaseModel):
    kind: str = Field(description="the kind's name, e.g. cluster.ready")
    title: str
    description: str
    email: bool = Field(description="whether it is sent to you by email")
    mandatory: bool = Field(description="sent whatever you choose: it cannot be turned off")


# Every kind a person may choose for (a webhook's test-send is never emailed).
CHOICES = sorted(set(KINDS) - NEVER_EMAILED)


class PreferenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Annotated[str, StringConstraints(min_length=1, max_length=KIND_MAX),
                    Field(json_schema_extra={"enum": CHOICES},
                          description="a kind GET lists for you")]
    email: StrictBool

    @field_validator("kind")
    @classmethod
    def _a_kind(cls, value: str) -> str:
        if value not in CHOICES:
            raise ValueError(f"no notification kind {value!r}; the kinds are "
                             f"{', '.join(CHOICES)}")
        return value


class PreferencesIn(BaseModel):
    """The kinds to change; the others stay as they are."""

    model_config = ConfigDict(extra="forbid")

    preferences: Annotated[list[PreferenceIn], Field(min_length=1, max_length=len(KINDS))]

    @field_validator("preferences")
    @classmethod
    def _each_kind_once(cls, value: list[PreferenceIn]) -> list[PreferenceIn]:
        named = [item.kind for item in value]
        twice = sorted({kind for kind in named if named.count(kind) > 1})
        if twice:
            raise ValueError(f"each kind once: {', '.join(twice)} named more than once")
        return value
