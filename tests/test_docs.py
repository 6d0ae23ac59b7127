"""The README stays a front door and the docs stay true: the README is short, every relative
link of the README and docs/ reaches a file (and a heading, if it names one), and
docs/layout.md places every package of app/ as the import contract does."""

from __future__ import annotations

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
