"""Pydantic's refusals in the portal's own words ("at most 40", not "Input should be less than
or equal to 40"): the one translation every HTML form uses."""

from __future__ import annotations

import re
from typing import Any

_HUGE = re.compile(r"^\s*[+-]?\d{19,}\s*$")


def in_our_words(item: Any) -> str:
    """One Pydantic error (``ValidationError.errors()`` item) as the portal says it."""
    kind, context, given = item["type"], item.get("ctx") or {}, item.get("input")
    if kind == "value_error":
        return str(item["msg"]).removeprefix("Value error, ")
    if kind in ("int_type", "int_parsing", "int_from_float"):
        if isinstance(given, str) and _HUGE.match(given):
            return "far too large a number"
        return "a whole number, such as 4"
    if kind in _BOUNDS:
        return _BOUNDS[kind].format(**context)
    if kind in ("string_too_short", "missing") and context.get("min_length", 1) <= 1:
        return "required"
    if kind == "string_too_short":
        return f"at least {context['min_length']} characters"
    if kind == "string_too_long":
        return (f"at most {context['max_length']} characters"
                + (f" (this one has {len(given)})" if isinstance(given, str) else ""))
    if kind == "too_short":
        return "choose at least one" if context.get("min_length") == 1 else (
            f"choose at least {context['min_length']}")
    if kind == "too_long":
        return f"choose at most {context['max_length']}"
    if kind in ("literal_error", "enum"):
        return f"choose one of {context.get('expected', 'the offered values')}"
    return _BY_KIND.get(kind, _by_family(kind))


_BOUNDS = {
    "greater_than_equal": "at least {ge}",
    "greater_than": "more than {gt}",
    "less_than_equal": "at most {le}",
    "less_than": "less than {lt}",
}
_BY_KIND = {
    "timezone_aware": "a date such as 2026-12-31",
    "bool_type": "yes or no",
    "bool_parsing": "yes or no",
    "extra_forbidden": "not a field of this form",
    "string_type": "text",
    "url_parsing": "an address such as https://example.com",
    "url_scheme": "an https:// address",
}


def _by_family(kind: str) -> str:
    if kind.startswith(("datetime", "date")):
        return "a date such as 2026-12-31"
    if kind.startswith(("float", "decimal")):
        return "a number, such as 4"
    if kind.startswith("url"):
        return "an address such as https://example.com"
    return "not a value this field takes"
