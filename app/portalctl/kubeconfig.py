"""Writing an issued kubeconfig: to its own file, or merged into the user's kubeconfig."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

SECTIONS = ("clusters", "users", "contexts")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
TTL = re.compile(r"(\d+)([smhd])")
JWT_PARTS = 3


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


def conflicts(existing: dict[str, Any], issued: dict[str, Any]) -> list[str]:
    """The entries of ``existing`` the issued ones would replace although they are something
    else: a context of another cluster or user, a cluster at another server, a user with
    another identity. Re-issuing the same kubeconfig (a fresh token) is no conflict."""
    found = []
    for section, same, describe in CHECKS:
        theirs = {e.get("name"): e for e in existing.get(section) or [] if isinstance(e, dict)}
        for entry in issued.get(section) or []:
            old = theirs.get(entry["name"])
            if old is not None and not same(old, entry):
                found.append(f"{section[:-1]} {entry['name']!r} {describe(old)}")
    return found


def _same_context(old: dict[str, Any], new: dict[str, Any]) -> bool:
    before, after = old.get("context") or {}, new.get("context") or {}
    return all(before.get(key) == after.get(key) for key in ("cluster", "user"))


def _context_text(old: dict[str, Any]) -> str:
    context = old.get("context") or {}
    return f"points at cluster {context.get('cluster')!r} and user {context.get('user')!r}"


def _same_cluster(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return bool((old.get("cluster") or {}).get("server") == new["cluster"]["server"])


def _cluster_text(old: dict[str, Any]) -> str:
    return f"is another server, {(old.get('cluster') or {}).get('server')}"


def _same_user(old: dict[str, Any], new: dict[str, Any]) -> bool:
    if old.get("user") == new.get("user"):
        return True
    subject = _token_subject(old)
    return subject is not None and subject == _token_subject(new)


def _token_subject(entry: dict[str, Any]) -> str | None:
    """Whom a ServiceAccount token (a JWT) acts as, read without checking its signature: only
    to tell whether two tokens are the same identity, never to trust either."""
    token = (entry.get("user") or {}).get("token")
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != JWT_PARTS:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:  # not base64 or not JSON
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) else None


def _user_text(_old: dict[str, Any]) -> str:
    return "holds another credential"


Same = Callable[[dict[str, Any], dict[str, Any]], bool]
Describe = Callable[[dict[str, Any]], str]
CHECKS: tuple[tuple[str, Same, Describe], ...] = (
    ("contexts", _same_context, _context_text),
    ("clusters", _same_cluster, _cluster_text),
    ("users", _same_user, _user_text),
)


class Conflict(Exception):
    """Merging would repoint entries of the user's kubeconfig at someone else."""

    def __init__(self, path: Path, found: list[str]) -> None:
        super().__init__(f"{path} already has entries of these names for something else: "
                         + "; ".join(found))
        self.found = found


def merge_into(path: Path, issued_yaml: str, *, use: bool, force: bool = False) -> str:
    """Merges into ``path`` (created if missing); returns the issued context's name. Raises
    Conflict, changing nothing, when an entry of the same name is someone else (unless
    ``force``)."""
    issued = yaml.safe_load(issued_yaml)
    existing = (yaml.safe_load(path.read_text()) if path.exists() else None) or {}
    found = conflicts(existing, issued)
    if found and not force:
        raise Conflict(path, found)
    write_private(path, yaml.safe_dump(merge(existing, issued, use=use), sort_keys=False))
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
