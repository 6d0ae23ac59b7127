"""Emission from the cluster reconciler uses the clusters domain's fixtures: acme with 16
approved H100s, and the harness."""

from tests.clusters.conftest import harness, tenancy

__all__ = ["harness", "tenancy"]
