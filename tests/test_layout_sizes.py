"""No module of app/ grows past the 500 lines docs/layout.md promises: one that does is split
along a seam of what it does, not left to grow (cli.py and clusters/service.py had)."""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
MOST_LINES = 500


def oversized(root: Path, most: int = MOST_LINES) -> list[str]:
    """Each ``.py`` file under ``root`` longer than ``most`` lines, as ``path: N lines``."""
    lengths = {path: len(path.read_text().splitlines()) for path in sorted(root.rglob("*.py"))}
    return [f"{path.relative_to(root.parent)}: {lines} lines"
            for path, lines in lengths.items() if lines > most]


def test_no_module_of_app_is_over_500_lines() -> None:
    assert len(list(APP.rglob("*.py"))) > 100, f"no modules found under {APP}"
    too_long = oversized(APP)
    assert not too_long, (f"over {MOST_LINES} lines, split along a seam of what it does: "
                          + ", ".join(too_long))


def test_an_oversized_module_is_named_with_its_length(tmp_path: Path) -> None:
    package = tmp_path / "app" / "grown"
    package.mkdir(parents=True)
    (package / "fits.py").write_text("x = 1\n" * MOST_LINES)
    (package / "grew.py").write_text("x = 1\n" * (MOST_LINES + 1))
    assert oversized(tmp_path / "app") == [f"app/grown/grew.py: {MOST_LINES + 1} lines"]
