"""Add-ons as one line of text each, for the template form and ``portalctl templates``:

    name repository chart version [setting=value ...]

for example ``kai-scheduler oci://ghcr.io/nvidia/kai-scheduler kai-scheduler v0.9.3
scheduler.replicas=2 global.gpuSharing=true``. A value is ``true``/``false``, a whole number,
or text; text that would read as one of those, or holds spaces, is written in double quotes
(``tag="2"``). Parsing keeps a line it cannot read as the raw string, for the API's schema to
refuse with its message. Standard library only: portalctl uses it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

FIELDS = ("name", "repo", "chart", "version")
_INTEGER = re.compile(r"^-?\d+$")
# A word: runs of plain characters and quoted text ("..." with JSON escapes, or '...').
_WORD = r"""(?:[^\s"']+|"(?:[^"\\]|\\.)*"|'[^']*')+"""
_TOKEN = re.compile(_WORD)
_LINE = re.compile(rf"\s*{_WORD}(?:\s+{_WORD})*\s*")


def parse_value(text: str) -> str | int | bool:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            decoded = json.loads(text)
        except ValueError:
            return text
        return decoded if isinstance(decoded, str) else text
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    if _INTEGER.fullmatch(text):
        return int(text)
    return text


def format_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    plain = not (text in ("true", "false") or _INTEGER.fullmatch(text) or not text
                 or any(c.isspace() or c in "\"'" for c in text))
    return text if plain else json.dumps(text)


def parse_setting(token: str) -> tuple[str, str | int | bool] | None:
    key, sep, value = token.partition("=")
    return (key, parse_value(value)) if sep and key else None


def parse_line(line: str) -> dict[str, Any] | str:
    """One add-on, or the line itself when it cannot be read."""
    if not _LINE.fullmatch(line):
        return line
    parts = _TOKEN.findall(line)
    if len(parts) < len(FIELDS):
        return line
    addon: dict[str, Any] = dict(zip(FIELDS, parts[:4], strict=True))
    settings = [parse_setting(token) for token in parts[4:]]
    if any(s is None for s in settings):
        return line
    if settings:
        addon["settings"] = dict(s for s in settings if s is not None)
    return addon


def parse_lines(text: str) -> list[dict[str, Any] | str]:
    return [parse_line(line.strip()) for line in text.splitlines() if line.strip()]


def format_line(addon: Mapping[str, Any]) -> str:
    settings = addon.get("settings") or {}
    words = [str(addon[f]) for f in FIELDS]
    words += [f"{key}={format_value(value)}" for key, value in settings.items()]
    return " ".join(words)


def format_lines(addons: Iterable[Mapping[str, Any]]) -> str:
    return "\n".join(format_line(addon) for addon in addons)
