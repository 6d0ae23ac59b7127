"""Checks of a vcluster.yaml against the chart it is meant for: the values schema and the edition.

Pure apart from reading the vendored schema files (schemas/, one per chart version).
"""

import json
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final

from jsonschema import validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from app.kube.manifests.vcluster import PRO_ONLY_PATHS

SCHEMA_DIR: Final = Path(__file__).resolve().parent / "schemas"


class UnknownChartVersion(LookupError):
    """No schema is vendored for this chart version."""


def schema_path(chart_version: str) -> Path:
    return SCHEMA_DIR / f"vcluster-{chart_version}.values.schema.json"


def validator_for(schema: dict[str, Any]) -> Validator:
    """A validator of the draft the schema declares; refuses a schema that is itself invalid."""
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@cache
def _chart_validator(chart_version: str) -> Validator:
    path = schema_path(chart_version)
    if not path.is_file():
        raise UnknownChartVersion(f"no vCluster values schema vendored for chart {chart_version}")
    return validator_for(json.loads(path.read_text(encoding="utf-8")))


def _dotted(path: Iterable[str | int]) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "".join(parts).removeprefix(".") or "(root)"


def _message(error: ValidationError) -> str:
    return f"{_dotted(error.absolute_path)}: {error.message}"


def schema_errors(values: Mapping[str, Any], validator: Validator) -> list[str]:
    """Every schema violation as "path: message", in a stable order."""
    return sorted(_message(error) for error in validator.iter_errors(values))


def validate_values(values: Mapping[str, Any], chart_version: str) -> list[str]:
    """Schema violations of ``values`` for the vendored chart version; empty when valid."""
    return schema_errors(values, _chart_validator(chart_version))


def _lookup(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def pro_only_paths(values: Mapping[str, Any]) -> list[str]:
    """The PRO_ONLY_PATHS that ``values`` turn on (true, or a non-empty list or map)."""
    return [path for path in PRO_ONLY_PATHS if _lookup(values, path)]
