"""deploy/prometheus: the alerting rules load in Prometheus (both forms), each fires when it
should and not otherwise (``promtool test rules``), and each names its runbook in the guide."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.dockerfile import ROOT
from tests.support.kube_server import tool
from tests.test_docs import _anchors

RULES_DIR = ROOT / "deploy" / "prometheus"
RULES = RULES_DIR / "portal-rules.yaml"
PROMETHEUS_RULE = RULES_DIR / "portal-prometheusrule.yaml"
RULE_TESTS = sorted((RULES_DIR / "tests").glob("*.yaml"))
OPERATOR_GUIDE = ROOT / "docs" / "operator.md"
PROMTOOL_SECONDS = 120


def _yaml(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text())
    assert isinstance(document, dict)
    return document


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _yaml(RULES)["groups"] for rule in group["rules"]]


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool("promtool")), *map(str, args)], capture_output=True,
                          text=True, timeout=PROMTOOL_SECONDS, cwd=RULES_DIR, check=False)


def _passes(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"promtool:\n{result.stdout}\n{result.stderr}"


def test_the_rule_file_loads_in_prometheus() -> None:
    _passes(_promtool("check", "rules", RULES))


def test_the_prometheusrule_spec_loads_in_prometheus(tmp_path: Path) -> None:
    spec = tmp_path / "prometheusrule-spec.yaml"
    spec.write_text(yaml.safe_dump(_yaml(PROMETHEUS_RULE)["spec"]))
    _passes(_promtool("check", "rules", spec))


@pytest.mark.parametrize("cases", RULE_TESTS, ids=lambda path: path.name)
def test_each_alert_fires_when_it_should_and_not_otherwise(cases: Path) -> None:
    _passes(_promtool("test", "rules", cases))


def _alerts_tested(expect_firing: bool) -> set[str]:
    found = set()
    for cases in RULE_TESTS:
        for case in _yaml(cases)["tests"]:
            for check in case.get("alert_rule_test", []):
                if bool(check["exp_alerts"]) == expect_firing:
                    found.add(check["alertname"])
    return found


def test_every_alert_has_a_case_that_fires_and_one_that_must_not() -> None:
    alerts = {rule["alert"] for rule in _rules()}
    assert alerts - _alerts_tested(expect_firing=True) == set()
    assert alerts - _alerts_tested(expect_firing=False) == set()


def test_the_prometheusrule_is_the_rule_file_as_generated() -> None:
    document = _yaml(PROMETHEUS_RULE)
    assert (document["apiVersion"], document["kind"]) == (
        "monitoring.coreos.com/v1", "PrometheusRule")
    assert document["spec"]["groups"] == _yaml(RULES)["groups"], (
        "portal-prometheusrule.yaml differs from portal-rules.yaml: run "
        "`python deploy/prometheus/make_prometheusrule.py`")
    generator = subprocess.run(
        [sys.executable, str(RULES_DIR / "make_prometheusrule.py"), "--check"],
        capture_output=True, text=True, timeout=60, check=False)
    assert generator.returncode == 0, "run `python deploy/prometheus/make_prometheusrule.py`"


@pytest.mark.parametrize("rule", _rules(), ids=lambda rule: rule["alert"])
def test_every_alert_says_how_bad_what_and_where_to_read_on(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    annotations = rule["annotations"]
    assert annotations["summary"] and annotations["description"]
    page, _, anchor = annotations["runbook"].partition("#")
    assert page == "docs/operator.md"
    assert anchor in _anchors(OPERATOR_GUIDE), f"docs/operator.md has no heading #{anchor}"
