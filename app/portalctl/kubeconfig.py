"""Writing an issued kubeconfig: to its own file, or merged into the user's kubeconfig."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

SECTIONS = ("clusters", "users", "contexts")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
TTL = re.compile(r"(\d+)([smhd])")


def ttl_seconds(text: str) -> int:
    """``1h``, ``90m``, ``1h30m`` or plain seconds."""
    if text.isdigit():
        return int(text)
    parts = TTL.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration like 1h, 90m or 1h30m")
    return sum(int(number) * UNITS[unit] for number, unit in parts)


def default_path() -> Path:
    """The file kubectl writes to: the first of $KUBECONFIG, else ~/.kube/config."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return Path(listed[0]) if listed else Path.home() / ".kube" / "config"


def merge(existing: dict[str, Any], issued: dict[str, Any], *, use: bool) -> dict[str, Any]:
    """``existing`` with the issued cluster, user and context added or replaced by name;
    every other entry, and current-context unless ``use`` (or there was none), untouched."""
    merged = dict(existing) or {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    had_contexts = bool(merged.get("contexts"))
    for section in SECTIONS:
        names = {entry["name"] for entry in issued.get(section) or []}
        kept = [e for e in merged.get(section) or [] if e.get("name") not in names]
        merged[section] = kept + list(issued.get(section) or [])
    if use or not had_contexts:
        merged["current-context"] = issued["current-context"]
    return merged


def merge_into(path: Path, issued_yaml: str, *, use: bool) -> str:
    """Merges into ``path`` (created if missing); returns the issued context's name."""
    issued = yaml.safe_load(issued_yaml)
    existing = yaml.safe_load(path.read_text()) if path.exists() else None
    write_private(path, yaml.safe_dump(merge(existing or {}, issued, use=use), sort_keys=False))
    return str(issued["current-context"])


def write_private(path: Path, text: str) -> None:
    """Writes via a 0600 temporary file renamed over ``path``: never readable by others, never
    half-written."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.portalctl-{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    temporary.replace(path)
