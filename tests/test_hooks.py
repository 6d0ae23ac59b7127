"""Cascades between domains run through hooks; every process that changes data connects them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.kit.hooks import Hook, HookNotConnected


def test_a_required_hook_refuses_to_fire_with_no_listener() -> None:
    hook: Hook[[int]] = Hook("example.required", required=True)
    with pytest.raises(HookNotConnected, match="nothing listens to example"):
        hook.fire(1)


def test_listeners_run_in_order_and_once_each() -> None:
    hook: Hook[[list[str]]] = Hook("example.order")
    first = hook.connect(lambda seen: seen.append("first"))
    hook.connect(lambda seen: seen.append("second"))
    hook.connect(first)
    seen: list[str] = []
    hook.fire(seen)
    assert seen == ["first", "second"]


HOOKS = ("app.tenants.events.membership_changed", "app.tenants.events.tenant_suspended",
         "app.auth.events.signed_in", "app.clusters.events.cluster_deleting",
         "app.clusters.events.cluster_row_deleting", "app.quotas.events.quota_shrunk",
         "app.quotas.events.quota_changed", "app.audit.events.recorded")

_REPORT = """
import importlib
for path in {hooks!r}:
    module, name = path.rsplit(".", 1)
    hook = getattr(importlib.import_module(module), name)
    print(path, len(hook._listeners))
"""


def _listeners_after(start: str) -> dict[str, int]:
    """Runs ``start`` in a fresh interpreter (no test conftest) and counts each hook's listeners."""
    script = start + _REPORT.format(hooks=HOOKS)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env={"PORTAL_DATABASE_URL": "sqlite://", "PATH": ""})
    return {line.split()[0]: int(line.split()[1]) for line in out.stdout.splitlines()
            if line.startswith("app.")}


@pytest.mark.parametrize("start", [
    "from app.process.asgi import create_app; create_app()",
    "from app.kit.config import Settings; from app.database.core import Database; "
    "from app.kube.connector import ClientConnector; "
    "from app.process.worker import build_kinds; s = Settings(); "
    "build_kinds(s, Database('sqlite://'), ClientConnector(s))",
    "import sys; from app.process import cli; sys.argv = ['portal', '--help']\n"
    "try:\n    cli.main()\nexcept SystemExit:\n    pass\n",
], ids=["web", "worker", "cli"])
def test_every_entry_point_connects_every_cascade(start: str) -> None:
    counts = _listeners_after(start)
    assert set(counts) == set(HOOKS)
    assert all(count >= 1 for count in counts.values()), counts


def test_importing_the_models_alone_connects_nothing() -> None:
    # So the check above means something: listeners come from the entry points' wiring.
    counts = _listeners_after("import app.process.all_models\n")
    assert counts["app.tenants.events.membership_changed"] == 0
