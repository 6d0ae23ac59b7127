"""The Makefile: `make run` installs what running the portal needs, `make test` the rest."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _planned(target: str, venv: Path) -> str:
    """What ``make TARGET`` would run with a fresh virtualenv at ``venv`` (nothing is run)."""
    planned = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return planned.stdout


def test_make_run_installs_the_portal_without_the_test_extras(tmp_path: Path) -> None:
    plan = _planned("run", tmp_path / "venv")
    assert "pip install --quiet -c constraints.txt -e ." in plan
    assert "[test]" not in plan
    assert "portal dev" in plan


def test_make_test_still_installs_the_test_extras_under_the_same_constraints(
    tmp_path: Path,
) -> None:
    plan = _planned("setup", tmp_path / "venv")
    assert "pip install --quiet -c constraints.txt -e '.[test]'" in plan


def test_make_run_after_make_test_installs_nothing_more(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / ".installed").touch()  # `make test` installed everything, just now
    plan = _planned("run", venv)
    assert "[test]" not in plan and "portal dev" in plan
    stamp = subprocess.run(
        ["make", "-C", str(ROOT), f"VENV={venv}", f"{venv}/bin/.runtime"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "pip" not in stamp.stdout
    assert (venv / "bin" / ".runtime").exists()
