"""Resource quantities: exact values, the API server's canonical form, and the fake's rewrite."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from kubernetes import utils as _k8s_utils

from app.kube.memory import InMemoryKube
from app.kube.quantities import (
    canonical_quantities,
    canonical_quantity,
    comparable,
    parse_quantity,
)

# The official client's helpers are untyped; going through Any keeps mypy strict elsewhere.
k8s_utils: Any = _k8s_utils
# What kube-apiserver returns for each (resource.Quantity's canonical String()).
CANONICAL = {
    "524288Mi": "512Gi", "65536Mi": "64Gi", "1000m": "1", "64": "64", "0": "0",
    "100m": "100m", "1.5": "1500m", "2000": "2k", "1000000": "1M", "200": "200",
    "0.5Gi": "512Mi", "1.5Gi": "1536Mi", "1Ki": "1Ki", "0.5Ki": "512", "1024": "1024",
    "256Mi": "256Mi", "2Gi": "2Gi", "1e3": "1e3", "1.5k": "1500", "0.1m": "100u",
}


@pytest.mark.parametrize(("written", "returned"), sorted(CANONICAL.items()))
def test_quantities_come_back_as_the_api_server_writes_them(written: str, returned: str) -> None:
    assert canonical_quantity(written) == returned
    assert parse_quantity(returned) == parse_quantity(written)


@pytest.mark.parametrize("text", [*CANONICAL, "3e-3", "2E", "12345678", "7Ti"])
def test_values_agree_with_the_official_clients_parser(text: str) -> None:
    assert parse_quantity(text) == k8s_utils.parse_quantity(text)


@pytest.mark.parametrize("text", ["", "Gi", "1.2.3", "1 Gi", "one", "1Gb"])
def test_malformed_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


def quota(hard: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "q", "namespace": "default"}, "spec": {"hard": hard}}


def test_comparable_compares_quota_and_limit_range_values_not_strings() -> None:
    assert comparable(quota({"requests.memory": "524288Mi"})) == comparable(
        quota({"requests.memory": "512Gi"}))
    assert comparable(quota({"requests.memory": "1Ti"})) != comparable(
        quota({"requests.memory": "512Gi"}))
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "l"},
              "spec": {"limits": [{"type": "Container", "default": {"cpu": "1000m"}}]}}
    assert comparable(limits)["spec"]["limits"][0] == {
        "type": "Container", "default": {"cpu": Decimal(1)}}


def test_quota_and_limit_range_values_are_rounded_up_to_milli_units_as_stored() -> None:
    # a bare quantity keeps nano precision; a core resource list does not
    assert canonical_quantity("1500u") == "1500u"
    assert canonical_quantities(quota({"requests.cpu": "1500u", "limits.cpu": "0.1m",
                                       "requests.memory": "1.0001"}))["spec"]["hard"] == {
        "requests.cpu": "2m", "limits.cpu": "1m", "requests.memory": "1001m"}
    # so a sub-milli value applied is no drift from what the server keeps
    assert comparable(quota({"requests.cpu": "0.5m"})) == comparable(quota({"requests.cpu": "1m"}))
    assert comparable(quota({"requests.cpu": "1.5m"})) != comparable(quota({"requests.cpu": "1m"}))


def test_only_quantity_fields_are_touched() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "n", "labels": {"size": "1000m"}}}
    assert canonical_quantities(namespace) == namespace
    odd = quota({"pods": "not-a-quantity"})
    assert canonical_quantities(odd) == odd


def test_the_fake_can_store_quantities_like_a_real_server() -> None:
    kube = InMemoryKube(normalize_quantities=True)
    stored = kube.apply(quota({"requests.memory": "524288Mi", "requests.cpu": "1000m"}))
    assert stored["spec"]["hard"] == {"requests.memory": "512Gi", "requests.cpu": "1"}
    kube.reset_calls()
    kube.apply(quota({"requests.memory": "524288Mi", "requests.cpu": "1000m"}))
    assert kube.mutations() == []  # the same values again: nothing changes
    assert InMemoryKube().apply(quota({"requests.cpu": "1000m"}))["spec"]["hard"] == {
        "requests.cpu": "1000m"}
