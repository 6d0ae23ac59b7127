"""Input rules shared by every schema: no control or invisible format characters, trimmed
strings."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

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
    and ZWNJ too (README, "Decisions worth knowing")."""
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
