"""Writes portal-prometheusrule.yaml, the Prometheus Operator's form of portal-rules.yaml.

Run it after changing the rules: ``python deploy/prometheus/make_prometheusrule.py``. With
``--check`` it writes nothing and exits 1 when the file on disk is not what it would write.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE / "portal-rules.yaml"
PROMETHEUS_RULE = HERE / "portal-prometheusrule.yaml"
HEADER = ("# Generated from portal-rules.yaml by make_prometheusrule.py: edit that file, then run\n"
          "# the script. Add the labels your Prometheus' ruleSelector wants (docs/operator.md).\n")


class _BlockStrings(yaml.SafeDumper):
    """Multi-line expressions stay readable: written as YAML literal blocks."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockStrings.add_representer(str, _string)


def prometheus_rule(rules: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "gpu-tenant-portal",
                         "labels": {"app.kubernetes.io/name": "gpu-tenant-portal",
                                    "app.kubernetes.io/component": "alerts"}},
            "spec": {"groups": rules["groups"]}}


def render() -> str:
    rules = yaml.safe_load(RULES.read_text())
    body = yaml.dump(prometheus_rule(rules), Dumper=_BlockStrings, sort_keys=False, width=100)
    return HEADER + body


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = PROMETHEUS_RULE.read_text() if PROMETHEUS_RULE.exists() else ""
        return 0 if current == text else 1
    PROMETHEUS_RULE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
