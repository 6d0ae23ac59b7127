"""Profiles (portal URL and API token) in the user's config directory, readable by them only."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PROFILE = "default"


@dataclass(frozen=True)
class Profile:
    name: str
    url: str
    token: str


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "portalctl" / "config.toml"


def chosen(name: str | None) -> str:
    return name or os.environ.get("PORTALCTL_PROFILE") or DEFAULT_PROFILE


def _read() -> dict[str, dict[str, str]]:
    path = config_path()
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text())
    profiles = data.get("profiles", {})
    return {name: dict(values) for name, values in profiles.items() if isinstance(values, dict)}


def load(name: str) -> Profile | None:
    values = _read().get(name)
    if not values or "url" not in values or "token" not in values:
        return None
    return Profile(name=name, url=values["url"], token=values["token"])


def save(profile: Profile) -> Path:
    profiles = _read()
    profiles[profile.name] = {"url": profile.url, "token": profile.token}
    return _write(profiles)


def remove(name: str) -> None:
    profiles = _read()
    if profiles.pop(name, None) is not None:
        _write(profiles)


def _write(profiles: dict[str, dict[str, str]]) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = []
    for name, values in sorted(profiles.items()):
        lines.append(f"[profiles.{_quote(name)}]")
        lines.extend(f"{key} = {_quote(value)}" for key, value in sorted(values.items()))
        lines.append("")
    # Created 0600 before the token is written, so it is never readable by others.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write("\n".join(lines))
    return path


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
