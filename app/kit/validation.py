"""Input rules shared by every schema: no control or invisible format characters, trimmed
strings."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BeforeValidator

from app.kit.format_characters import describe, first_format_character

_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Free text (reasons, notes) may span lines; other control characters are still refused.
_CONTROL_EXCEPT_NEWLINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def format_character_problem(value: str) -> str | None:
    """Why ``value`` cannot be shown to people as it is, or None when it can.

    Unicode format characters (category Cf: bidirectional overrides and isolates, zero-width
    spaces and joiners, soft hyphens, tag characters, ...) are invisible, yet reorder or hide
    what is shown: "acme", U+202E, "gnp.exe" reads as "acmeexe.png". All are refused, ZWJ
    and ZWNJ too (docs/design.md)."""
    hidden = first_format_character(value)
    if hidden:
        return f"must not contain {describe(hidden)}, an invisible formatting character"
    return None


def single_line(value: str) -> str:
    if _ANY_CONTROL.search(value):
        raise ValueError("must not contain control characters or line breaks")
    return _shown_as_typed(value).strip()


def multi_line(value: str) -> str:
    if _CONTROL_EXCEPT_NEWLINES.search(value):
        raise ValueError("must not contain control characters")
    return _shown_as_typed(value).strip()


def _shown_as_typed(value: str) -> str:
    problem = format_character_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def email_address(value: str) -> str:
    value = single_line(value)
    if not _EMAIL.match(value):
        raise ValueError("must be an email address such as alice@example.com")
    return value


def _refuse_format_characters(value: object) -> object:
    """Before lengths and patterns: the invisible character is what the sender must hear of."""
    if isinstance(value, str):
        _shown_as_typed(value)
    return value


_VISIBLE = BeforeValidator(_refuse_format_characters)
SingleLine = Annotated[str, _VISIBLE, AfterValidator(single_line)]
MultiLine = Annotated[str, _VISIBLE, AfterValidator(multi_line)]
EmailAddress = Annotated[str, _VISIBLE, AfterValidator(email_address)]
# Text kept exactly as sent (a Helm value may span lines or start with a space), but never
# with an invisible format character.
Visible = Annotated[str, _VISIBLE]


# The calendar Python (and so the portal) can hold: years 1 to 9999, in UTC.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def in_utc(value: datetime) -> datetime:
    """An aware moment in UTC; one whose offset takes it off the calendar is refused."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("must lie between 0001-01-01 and 9999-12-31 in UTC") from None


def clamped_to_calendar(value: datetime) -> datetime:
    """A bound of a time filter in UTC (no offset: UTC). One that an offset takes off the
    calendar is the calendar's edge: nothing lies beyond it to filter either way."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # Only an offset east of UTC can take a moment before the first day, west past the last.
        east = (value.utcoffset() or timedelta(0)) > timedelta(0)
        return EARLIEST if east else LATEST


# A moment a request asks the portal to keep (an end date): an offset is required.
UtcMoment = Annotated[AwareDatetime, AfterValidator(in_utc)]
# A bound of a time filter in a query string: no offset means UTC.
FilterMoment = Annotated[datetime, AfterValidator(clamped_to_calendar)]


# The largest id a row can have on every backend (PostgreSQL integer).
MAX_ROW_ID = 2_147_483_647

_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Host names join tenant and cluster with "--" (t-<tenant>--<cluster>, <tenant>--<cluster>), so
# neither may contain it: otherwise tenant "a-b" + cluster "c" and tenant "a" + cluster "b-c"
# would share a namespace and a KAI queue on the host.
HOST_NAME_SEPARATOR = "--"
# Tenant slugs become KAI queue names beside the root queue of all tenants.
RESERVED_TENANT_SLUGS = frozenset({"tenants"})


def dns_label_problem(value: str, max_length: int) -> str | None:
    """Why ``value`` cannot name a tenant or cluster, or None when it can."""
    if not value:
        return "required"
    if len(value) > max_length:
        return f"at most {max_length} characters (this one has {len(value)})"
    if not _DNS_1123_LABEL.match(value):
        hidden = ("holds a control character; " if _ANY_CONTROL.search(value)
                  else _hidden_format_character(value))
        return (f"{hidden}a DNS-1123 label: lower-case letters, digits and '-', "
                "starting and ending with a letter or digit")
    if HOST_NAME_SEPARATOR in value:
        return "'--' is reserved: it separates tenant and cluster in names on the host"
    return None


def _hidden_format_character(value: str) -> str:
    hidden = first_format_character(value)
    return f"holds {describe(hidden)}, an invisible formatting character; " if hidden else ""
