"""The README stays a front door and the docs stay true: the README is short, every relative
link of the README and docs/ reaches a file (and a heading, if it names one),
docs/layout.md places every package of app/ as the import contract does, and every step of
docs/journey.md names the tests that walk it, tests that exist."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.spread

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LAYOUT = ROOT / "docs" / "layout.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 250

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in _prose(page.read_text()):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(2).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_the_readme_is_a_front_door_not_a_manual() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move the reference to docs/ "
        "and link it")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    broken = []
    for line in _prose(page.read_text()):
        for target in _LINK.findall(line):
            if _EXTERNAL.match(target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{target}: no such heading in {linked.relative_to(ROOT)}")
    assert broken == []


def test_the_readme_links_every_page_of_docs() -> None:
    readme = README.read_text()
    assert [page.name for page in PAGES[1:] if f"(docs/{page.name}" not in readme] == []


def _layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers")
    assert "ignore_imports" not in contract, "docs/layout.md says the contract has no exceptions"
    return [{name.strip() for name in layer.split("|")} for layer in contract["layers"]]


def _layout_rows() -> list[set[str]]:
    """The packages each row of docs/layout.md's table names in its first column."""
    rows = [line.split("|")[1] for line in _prose(LAYOUT.read_text())
            if line.startswith("| `")]
    return [set(re.findall(r"`(\w+)`", row)) for row in rows]


def test_the_layout_table_is_the_import_contract_in_its_order() -> None:
    assert _layout_rows() == _layers()


def test_every_package_of_app_is_in_the_layout() -> None:
    packages = {path.parent.name for path in (ROOT / "app").glob("*/__init__.py")}
    placed = set().union(*_layout_rows())
    assert sorted(packages - placed) == []


# ----- docs/journey.md: every step of the README's journey names the tests that walk it

JOURNEY = ROOT / "docs" / "journey.md"
_STEP = re.compile(r"^(\d+)\. ")
_WALKED_BY = re.compile(r"<!--\s*walked by:\s*(.*?)\s*-->")


def journey_steps(text: str) -> dict[int, list[str]]:
    """Each numbered step of the journey and the tests its ``<!-- walked by: … -->`` names
    (a step runs from its number to the next step or heading)."""
    steps: dict[int, list[str]] = {}
    current: int | None = None
    for line in _prose(text):
        number = _STEP.match(line)
        if number is not None:
            current = int(number.group(1))
            assert current not in steps, f"step {current} is numbered twice"
            steps[current] = []
        elif line.startswith("#"):
            current = None
        if current is not None:
            for named in _WALKED_BY.findall(line):
                steps[current].extend(n.strip() for n in named.split(",") if n.strip())
    return steps


def defined_tests(path: Path) -> set[str]:
    """The test functions a test file defines, at module level or in its ``Test`` classes
    (read with ``ast``: nothing is run or imported)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found |= {f"{node.name}::{item.name}" for item in node.body
                      if isinstance(item, ast.FunctionDef) and item.name.startswith("test")}
    return found


def unwalked(text: str) -> list[str]:
    """What is wrong with the journey's markers: a step naming no test, a test that is not
    there."""
    steps = journey_steps(text)
    wrong = [] if steps else ["no numbered step"]
    if sorted(steps) != list(range(1, len(steps) + 1)):
        wrong.append(f"steps are not numbered 1 to {len(steps)}: {sorted(steps)}")
    for number, tests in steps.items():
        if not tests:
            wrong.append(f"step {number} names no test that walks it")
        for test in tests:
            path, _, name = test.partition("::")
            name = name.split("[", 1)[0]  # a parametrized case names its function
            file = ROOT / path
            if not (path.startswith("tests/") and file.is_file()):
                wrong.append(f"step {number}: no test file {path}")
            elif name not in defined_tests(file):
                wrong.append(f"step {number}: {path} has no test {name}")
    return wrong


def test_every_step_of_the_journey_names_tests_that_exist() -> None:
    assert unwalked(JOURNEY.read_text()) == []


def test_the_journey_check_finds_a_step_without_a_test_and_a_test_that_is_gone() -> None:
    walked = ("1. **alice** signs in.\n   <!-- walked by: tests/test_docs.py::"
              "test_every_step_of_the_journey_names_tests_that_exist -->\n")
    assert unwalked(walked) == []
    assert unwalked(walked + "2. **bob** looks.\n") == ["step 2 names no test that walks it"]
    assert unwalked(walked.replace("test_every", "test_no")) == [
        "step 1: tests/test_docs.py has no test test_no_step_of_the_journey_names_tests_that_exist"]
    assert unwalked(walked.replace("tests/test_docs.py", "tests/gone.py")) == [
        "step 1: no test file tests/gone.py"]
