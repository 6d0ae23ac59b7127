"""Test machinery lives in tests/support, once: the one-shot drive of a kind through the runtime
(``drive.py``), the stand-in for helm (``installers.py``), the wait for a condition
(``waiting.py``); the product carries none of it."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.support.paths import ROOT

DRIVE = {"run_due", "runtime_for"}
WAITS = {"eventually", "_eventually", "until", "_until", "wait_until", "wait_for"}


def sources(*folders: str) -> Iterator[tuple[str, ast.Module]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def defined(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    return (node for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


def test_the_product_has_no_one_shot_drive_of_a_kind() -> None:
    found = [f"{path}:{function.lineno} {function.name}" for path, tree in sources("app")
             for function in defined(tree) if function.name in DRIVE]
    assert found == [], "tests/support/drive.py drives a kind through the runtime"


def test_one_class_in_the_tests_and_benches_plays_helm() -> None:
    found = [f"{path}:{node.lineno} {node.name}" for path, tree in sources("tests", "bench")
             for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
             and any(function.name == "install_addon" for function in defined(node))]
    assert [where.split(" ")[1] for where in found] == ["FakeInstaller"], found
    assert found[0].startswith("tests/support/installers.py:"), found


def test_one_function_in_the_tests_and_benches_waits_for_a_condition() -> None:
    found = [f"{path}:{node.lineno} {node.name}" for path, tree in sources("tests", "bench")
             for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in WAITS]
    assert len(found) == 1 and found[0].startswith("tests/support/waiting.py:"), found
