"""The reference of every setting, as docs/operator.md carries it and `portal config` prints."""

from __future__ import annotations

import json
from typing import Any

from app.kit.config import ENV_PREFIX, Settings

# Defaults the reference shows as words: machine-dependent or secret.
_SHOWN_DEFAULTS = {
    "database_url": "`sqlite:///$PWD/portal.db`",
    "secret_key": "development value",
    "encryption_key": "development value",
    "oidc_client_secret": "development value",
}


def configuration_reference() -> str:
    """The markdown table of every setting, as docs/operator.md carries it."""
    lines = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        variable = f"`{ENV_PREFIX}{name.upper()}`"
        lines.append(f"| {variable} | {_shown_default(name, field.default)} | "
                     f"{field.description or ''} |")
    return "\n".join(lines) + "\n"


def _shown_default(name: str, default: Any) -> str:
    if name in _SHOWN_DEFAULTS:
        return _SHOWN_DEFAULTS[name]
    if default is None or default == [] or default == "":
        return "unset"
    if isinstance(default, list):
        return f"`{json.dumps(default)}`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"
