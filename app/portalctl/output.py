"""Printing reads as a table, JSON (the API's objects verbatim) or YAML."""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import typer
import yaml

from app.kit.format_characters import visible_format_characters


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def emit(data: Any, fmt: Format, columns: Sequence[str]) -> None:
    """``data`` is one object or a list of them; tables show ``columns`` of each."""
    if fmt is Format.json:
        typer.echo(json.dumps(data, indent=2))
    elif fmt is Format.yaml:
        typer.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    elif isinstance(data, list):
        table(data, columns)
    else:
        for key in columns:
            typer.echo(f"{key + ':':<22} {_cell(data.get(key))}")


def table(rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    header = "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))
    typer.secho(header.rstrip(), bold=True)  # click strips the style off a non-terminal
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    # A terminal obeys a right-to-left override as a page would: write it out (JSON and YAML
    # stay the API's objects verbatim).
    return visible_format_characters(str(value))
