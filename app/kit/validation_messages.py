"""Pydantic's refusals in the portal's own words ("at most 40", not "Input should be less than
or equal to 40"): the one translation every HTML form uses; and the API's refusals without
Pydantic's prefixes ("Value error, ...") or a JSON decoder's position as a field name."""

from __future__ import annotations

import re
from typing import Any

_HUGE = re.compile(r"^\s*[+-]?\d{19,}\s*$")
# What Pydantic puts before a validator's own sentence.
LIBRARY_PREFIXES = ("Value error, ", "Assertion failed, ")


def without_library_prefix(message: str) -> str:
    for prefix in LIBRARY_PREFIXES:
        message = message.removeprefix(prefix)
    return message


def api_field_error(item: Any) -> dict[str, str]:
    """One refusal of a request (``RequestValidationError.errors()`` item) as the API's problem
    lists it: the field's dotted path and the message."""
    if item["type"] == "json_invalid":
        return {"field": "body", "message": not_json(item)}
    field = ".".join(str(part) for part in item["loc"] if part != "body")
    return {"field": field, "message": without_library_prefix(str(item["msg"]))}


def not_json(item: Any) -> str:
    """A body that does not parse: FastAPI's location is the character, not a field."""
    where = item["loc"][-1] if isinstance(item["loc"][-1], int) else None
    reason = (item.get("ctx") or {}).get("error") or "it does not parse"
    return f"not valid JSON: {reason}" + (f" at character {where}" if where is not None else "")


def in_our_words(item: Any) -> str:
    """One Pydantic error (``ValidationError.errors()`` item) as the portal says it."""
    kind, context, given = item["type"], item.get("ctx") or {}, item.get("input")
    if kind in ("value_error", "assertion_error"):
        return without_library_prefix(str(item["msg"]))
    if kind == "json_invalid":
        return not_json(item)
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
