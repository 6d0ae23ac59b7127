"""Kubernetes resource quantities: their exact value, and the form an API server returns.

An API server parses every quantity it stores and writes it back in canonical form
(``524288Mi`` comes back as ``512Gi``, ``1000m`` as ``1``, ``1.5`` as ``1500m``), so comparing
what the portal applies with what the server returns must compare values, not strings.
``comparable`` does that for the quantity fields of the kinds the portal applies;
``canonical_quantities`` is the server's rewrite, for the in-memory fake.

Those fields are core resource lists (ResourceQuota ``hard``, LimitRange limits), which the
server's defaulting also rounds up to milli precision (``SetDefaults_ResourceList``: ``0.5m``
and ``100u`` are stored as ``1m``); a bare quantity keeps nano precision. Without the rounding,
a sub-milli value would differ from what is stored on every resync, and be applied again.

Pure and Decimal-based: exact, and no dependency on the Kubernetes client's helpers.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_UP, Decimal
from typing import Any

Manifest = dict[str, Any]

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_BINARY_SUFFIX = {exponent: suffix for suffix, exponent in _BINARY.items()}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE])?$"
)
# The API server keeps at most nano precision and rounds finer values up.
_NANO = Decimal("1e-9")
# Core resource lists are rounded up (away from zero) to milli precision.
_MILLI = Decimal("1e-3")
# LimitRange items whose values are maps of resource name to quantity.
_LIMIT_KEYS = ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio")


def parse_quantity(text: str | int) -> Decimal:
    """The exact value of a quantity such as ``512Gi``, ``100m`` or ``1e3``."""
    return _parse(text)[0]


def canonical_quantity(text: str | int) -> str:
    """The string an API server returns for ``text`` (Kubernetes' canonical form)."""
    return _canonical(*_parse(text))


def resource_list_value(text: str | int) -> Decimal:
    """The value an API server stores for ``text`` in a core resource list."""
    return _parse_in_resource_list(text)[0]


def canonical_resource_list_quantity(text: str | int) -> str:
    """The string an API server returns for ``text`` in a core resource list."""
    return _canonical(*_parse_in_resource_list(text))


def _canonical(value: Decimal, form: str) -> str:
    if value == 0:
        return "0"
    if form == "binary" and abs(value) >= 1024 and value == value.to_integral_value():
        return _binary(int(value))
    mantissa, exponent = _decimal_parts(value)
    if form == "exponent":
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    suffix = _DECIMAL_SUFFIX.get(exponent)
    return f"{mantissa}{suffix}" if suffix is not None else f"{mantissa}e{exponent}"


def comparable(obj: Manifest) -> Manifest:
    """A copy whose quantity fields hold the values a server stores, so that what the portal
    applies and what the server returns compare equal when they are equal; a KAI Queue's
    numbers as exact Decimals (its CRD's ``type: number``: 0.07 and 3 against 3.0)."""
    result = _map_quantities(obj, resource_list_value)
    if result.get("kind") == "Queue":
        for amounts in ((result.get("spec") or {}).get("resources") or {}).values():
            _convert_values(amounts, _exact_number)
    return result


def _exact_number(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a number: {value!r}")
    try:
        return Decimal(str(value)).normalize()
    except ArithmeticError as error:
        raise ValueError(f"not a number: {value!r}") from error


def drifted(live: Manifest | None, wanted: Manifest) -> bool:
    """Whether a stored object lacks a field the portal sets, or holds another value there.

    Others may add fields; quantities compare by value (the server returns 524288Mi as 512Gi).
    """
    return live is None or not _contains(comparable(live), comparable(wanted))


def _contains(live: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(
            _contains(live.get(key), value) for key, value in wanted.items())
    if isinstance(wanted, list):
        return isinstance(live, list) and len(live) == len(wanted) and all(
            _contains(a, b) for a, b in zip(live, wanted, strict=True))
    return bool(live == wanted)


def canonical_quantities(obj: Manifest) -> Manifest:
    """A copy with every quantity field rewritten as an API server stores it."""
    return _map_quantities(obj, canonical_resource_list_quantity)


def _parse(text: str | int) -> tuple[Decimal, str]:
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)  # the API accepts a bare JSON integer too
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = Decimal(match["number"]), match["suffix"] or ""
    if suffix in _BINARY:
        value, form = number * 2 ** _BINARY[suffix], "binary"
    elif suffix[:1] in ("e", "E") and suffix not in _DECIMAL:
        value, form = number.scaleb(int(suffix[1:])), "exponent"
    else:
        value, form = number.scaleb(_DECIMAL[suffix]), "decimal"
    return value.quantize(_NANO, rounding=ROUND_CEILING).normalize(), form


def _parse_in_resource_list(text: str | int) -> tuple[Decimal, str]:
    value, form = _parse(text)
    return value.quantize(_MILLI, rounding=ROUND_UP).normalize(), form


def _binary(value: int) -> str:
    exponent = 0
    while value % 1024 == 0 and exponent < 60:
        value //= 1024
        exponent += 10
    return f"{value}{_BINARY_SUFFIX.get(exponent, '')}"


def _decimal_parts(value: Decimal) -> tuple[int, int]:
    """An integer mantissa and an exponent that is a multiple of 3, as large as possible."""
    sign, digits, exponent = value.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits))) * (-1 if sign else 1)
    shift = exponent % 3
    return mantissa * 10 ** shift, exponent - shift


def _map_quantities(obj: Manifest, convert: Callable[[str], Any]) -> Manifest:
    result = copy.deepcopy(obj)
    spec = result.get("spec")
    if not isinstance(spec, dict):
        return result
    if result.get("kind") == "ResourceQuota":
        _convert_values(spec.get("hard"), convert)
    elif result.get("kind") == "LimitRange":
        for item in spec.get("limits") or []:
            for key in _LIMIT_KEYS if isinstance(item, dict) else ():
                _convert_values(item.get(key), convert)
    return result


def _convert_values(values: Any, convert: Callable[[str], Any]) -> None:
    if not isinstance(values, dict):
        return
    for name, value in values.items():
        with contextlib.suppress(ValueError):  # not a quantity: compare it as written
            values[name] = convert(value)
