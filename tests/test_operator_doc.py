"""docs/operator.md: its configuration reference is the one the settings class generates."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.kit.config import ENV_PREFIX, Settings
from app.kit.config_reference import configuration_reference
from app.process.cli import cli

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "operator.md"
BEGIN, END = "<!-- settings-reference:begin -->\n", "<!-- settings-reference:end -->"


def _documented_table() -> str:
    text = GUIDE.read_text()
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END, start)]


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_documented_in_the_operator_guide(name: str) -> None:
    assert f"| `{ENV_PREFIX}{name.upper()}` |" in _documented_table(), (
        f"{ENV_PREFIX}{name.upper()} is missing from docs/operator.md: "
        "paste the output of `portal config reference` between its settings-reference markers")


def test_the_guide_carries_the_generated_reference_unchanged() -> None:
    assert _documented_table() == configuration_reference(), (
        "docs/operator.md's configuration table differs from the settings class: "
        "paste the output of `portal config reference` between its settings-reference markers")


def test_every_setting_says_what_it_does() -> None:
    assert [name for name, field in Settings.model_fields.items() if not field.description] == []


def test_portal_config_reference_prints_the_table() -> None:
    result = CliRunner().invoke(cli, ["config", "reference"])
    assert result.exit_code == 0
    assert result.stdout == configuration_reference()
    assert result.stdout.startswith("| Variable | Default | Meaning |")


def test_the_reference_shows_no_secret_default() -> None:
    reference = configuration_reference()
    defaults = Settings(database_url="sqlite://")
    for secret in (defaults.secret_key, defaults.encryption_key, defaults.oidc_client_secret):
        assert secret not in reference
