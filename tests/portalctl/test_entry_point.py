"""The installed `portalctl` script, as a shell script would run it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.main import get_command
from typer.testing import CliRunner

from app.portalctl.main import app
from tests.portalctl.conftest import Portal, PortalCtl

PORTALCTL = Path(sys.executable).parent / "portalctl"
ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_script_signs_in_and_lists_clusters_as_json(
    portal: Portal, tmp_path: Path
) -> None:
    assert PORTALCTL.exists(), "`pip install -e .` installs the portalctl script"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    login = subprocess.run([str(PORTALCTL), "login", "--url", portal.url, "--token-stdin"],
                           input=portal.tokens["acme-admin"], env=env, capture_output=True,
                           text=True, check=False)
    assert login.returncode == 0, login.stderr
    listed = subprocess.run([str(PORTALCTL), "clusters", "list", "-o", "json"], env=env,
                            capture_output=True, text=True, check=False)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    missing = subprocess.run([str(PORTALCTL), "clusters", "show", "nope"], env=env,
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 3
    assert missing.stderr.startswith("error: ") and "Traceback" not in missing.stderr


def test_a_token_piped_in_without_token_stdin_stops_at_once_saying_what_to_pass(
    portalctl: PortalCtl,
) -> None:
    """It stops before listening for the browser or printing a sign-in link."""
    environment = {"PATH": os.environ.get("PATH", ""),
                   "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                   **{k: v for k, v in portalctl.env.items() if v is not None}}
    piped = subprocess.run([str(PORTALCTL), "login", "--url", "http://127.0.0.1:9",
                            "--timeout", "30"], input="gtp_secret\n", env=environment,
                           capture_output=True, text=True, timeout=60, check=False)
    assert piped.returncode == 2
    assert "--token-stdin" in piped.stderr and "not a terminal" in piped.stderr
    assert "cli/login" not in piped.stderr and "Waiting" not in piped.stderr
    assert "gtp_secret" not in piped.stderr + piped.stdout
    assert not (portalctl.home / ".config" / "portalctl" / "config.toml").exists()


def test_the_readme_and_make_run_say_where_portalctl_is_from_its_first_mention() -> None:
    readme = (ROOT / "README.md").read_text()
    first = readme.index("portalctl")
    paragraph = readme[readme.rindex("\n\n", 0, first):readme.index("\n\n", first)]
    assert ".venv/bin/portalctl" in paragraph and "pipx install ." in paragraph
    dry_run = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True,
                             check=True)
    said = [line for line in dry_run.stdout.splitlines() if line.startswith("echo ")]
    assert any(f"{ROOT}/.venv/bin/portalctl" in line for line in said), dry_run.stdout


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group under ``command``, itself first."""
    children = getattr(command, "commands", None) or {}
    return [(path, command), *(found for name, child in children.items()
                               for found in _commands(child, (*path, name)))]


def test_every_command_has_an_example_in_its_help() -> None:
    commands = [path for path, command in _commands(get_command(app))
                if not getattr(command, "commands", None)]
    assert len(commands) == 72  # notifications: prefs, set
    for path in commands:
        result = CliRunner().invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.stderr)
        assert "Example:" in result.stdout, path


def test_every_help_reads_at_80_columns_with_whole_option_names_and_flags_as_flags() -> None:
    for path, command in _commands(get_command(app)):
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, (path, result.stderr)
        shown = result.stdout
        assert "<bool>" not in shown, path
        assert "\N{HORIZONTAL ELLIPSIS}" not in shown, path
        assert max(len(line) for line in shown.splitlines()) <= 80, path
        names = [name for param in command.params if not getattr(param, "hidden", False)
                 for name in (*param.opts, *param.secondary_opts) if name.startswith("-")]
        for name in names:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", shown), (path, name)


def test_the_shell_completion_script_is_shown_and_completes_subcommands(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    script = subprocess.run([str(PORTALCTL), "--show-completion", "bash"], env=env,
                            capture_output=True, text=True, check=False)
    assert script.returncode == 0, script.stderr
    assert "complete -o default -F _portalctl_completion portalctl" in script.stdout

    def complete(words: str) -> list[str]:
        # What bash runs through that script on Tab.
        answer = subprocess.run(
            [str(PORTALCTL)], capture_output=True, text=True, check=False,
            env={**env, "_PORTALCTL_COMPLETE": "complete_bash", "COMP_WORDS": words,
                 "COMP_CWORD": str(len(words.split(" ")) - 1)})
        assert answer.returncode == 0, answer.stderr
        return answer.stdout.split()

    assert complete("portalctl gpu") == ["gpu-classes"]
    assert complete("portalctl nodes ") == ["list", "show", "suggest", "assign", "unassign"]
    assert "--follow" in complete("portalctl audit --fo")
