"""Checks of a vcluster.yaml against the chart it is meant for: the values schema and the edition.

Pure: the schema is the chart's own values.schema.json, read from the chart as its repository
serves it (app/templates/charts.py); nothing of the chart is kept in the portal.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema import validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from app.kube.manifests.vcluster import PRO_ONLY_PATHS


def validator_for(schema: dict[str, Any]) -> Validator:
    """A validator of the draft the schema declares; refuses a schema that is itself invalid."""
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _dotted(path: Iterable[str | int]) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "".join(parts).removeprefix(".") or "(root)"


def _message(error: ValidationError) -> str:
    return f"{_dotted(error.absolute_path)}: {error.message}"


def schema_errors(values: Mapping[str, Any], validator: Validator) -> list[str]:
    """Every schema violation as "path: message", in a stable order."""
    return sorted(_message(error) for error in validator.iter_errors(values))


def validate_values(values: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Violations of ``values`` against a chart's values schema; empty when valid."""
    return schema_errors(values, validator_for(dict(schema)))


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
