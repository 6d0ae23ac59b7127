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


def test_make_test_checks_and_builds_side_by_side_then_runs_the_suite_once(
        tmp_path: Path) -> None:
    plan = _planned("test", tmp_path / "venv").splitlines()
    suite = [n for n, line in enumerate(plan) if "-m pytest -n" in line]
    checks = [n for n, line in enumerate(plan)
              if line.endswith(("/mypy", "ruff check app tests bench"))
              or "build-programs.sh" in line]
    assert len(suite) == 1 and len(checks) > 2
    assert max(checks) < suite[0]


def test_every_apt_get_waits_for_the_others() -> None:
    """`make test` installs its packages side by side, and dpkg has one lock: an apt-get
    started beside another would fail at once."""
    scripts = [ROOT / "Makefile", *sorted((ROOT / "tools").glob("*.sh"))]
    calls = [(path.name, line.strip()) for path in scripts
             for line in path.read_text().splitlines()
             if "apt-get" in line and not line.strip().startswith("#")]
    assert calls
    unlocked = [call for call in calls
                if "flock" not in call[1] and "$(APT_GET)" not in call[1]
                and '"${apt[@]}"' not in call[1]]
    assert not unlocked, unlocked
