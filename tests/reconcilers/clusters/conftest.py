"""The cluster reconciler's tests use the clusters domain's fixtures: acme with 16 approved
H100s, and the harness."""

from tests.clusters.conftest import harness, tenancy

__all__ = ["harness", "tenancy"]
