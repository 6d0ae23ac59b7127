"""Domains point one way: a lower domain never imports a higher one.

auth, hosts → tenants → quotas → nodes → clusters → kubeconfigs → usage, templates, fleet. A cascade
from a lower domain to a higher one goes through a hook (app.kit.hooks) that the higher domain
connects to.
"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
LAYERS = {"auth": 0, "hosts": 0, "tenants": 1, "quotas": 2, "nodes": 3, "clusters": 4,
          "kubeconfigs": 5, "usage": 6, "templates": 6, "fleet": 6}

# Imports against the direction that are still there, each with why. The test fails when one
# of them goes, so the list only shrinks.
KNOWN = {
    # A quota is per GPU class, and GPU classes are defined with the node inventory.
    ("quotas", "nodes"): "GPU classes live in app/nodes",
    # The quota views show the GPUs the tenant's clusters hold, summed in the same statement.
    ("quotas", "clusters"): "allocated GPUs read in app/quotas/repository.py",
}


def _imported_domains(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            parts = name.split(".")
            if len(parts) > 1 and parts[0] == "app" and parts[1] in LAYERS:
                found.add(parts[1])
    return found


def _upward_imports() -> dict[tuple[str, str], list[str]]:
    upward: dict[tuple[str, str], list[str]] = {}
    for domain, layer in LAYERS.items():
        for path in sorted((APP / domain).rglob("*.py")):
            for target in _imported_domains(path):
                if LAYERS[target] > layer:
                    upward.setdefault((domain, target), []).append(str(path.relative_to(APP)))
    return upward


def test_no_domain_imports_a_higher_one_beyond_the_known_ones() -> None:
    unexpected = {pair: files for pair, files in _upward_imports().items() if pair not in KNOWN}
    assert unexpected == {}


def test_the_known_exceptions_are_all_still_there() -> None:
    gone = set(KNOWN) - set(_upward_imports())
    assert gone == set(), "remove these from KNOWN: they are fixed"
