"""Resyncs against a server that stores quantities in canonical form, as a real one does.

The reconciler applies ``524288Mi``; the API server returns ``512Gi``. Comparing strings would
re-apply the unchanged ResourceQuota on every resync; comparing values costs no writes.
"""

from __future__ import annotations

from app.database.core import Database
from app.kube.manifests import host_namespace_name
from tests.clusters.support import Harness, create
from tests.support.tenancy import Tenancy

NAMESPACE = host_namespace_name("acme", "train")


def normalizing(database: Database) -> Harness:
    return Harness.build(database, normalize_quantities=True)


def quota_hard(harness: Harness) -> dict[str, str]:
    quota = harness.kube.get("v1", "ResourceQuota", "tenant-quota", NAMESPACE)
    assert quota is not None
    return dict(quota["spec"]["hard"])


def test_a_resync_against_a_server_that_rewrote_quantities_writes_nothing(
    database: Database, tenancy: Tenancy
) -> None:
    harness = normalizing(database)
    create(database, tenancy, memory_mib=524288)
    harness.converge()
    assert quota_hard(harness)["requests.memory"] == "512Gi"  # applied as 524288Mi
    harness.kube.reset_calls()

    assert harness.run() == 3  # the cluster, its tenant's queue, its host's shared objects
    assert harness.kube.writes() == []
    assert harness.kube.mutations() == []


def test_a_changed_quantity_is_still_drift(database: Database, tenancy: Tenancy) -> None:
    harness = normalizing(database)
    create(database, tenancy, memory_mib=524288)
    harness.converge()
    quota = harness.kube.get("v1", "ResourceQuota", "tenant-quota", NAMESPACE)
    assert quota is not None
    quota["spec"]["hard"]["limits.memory"] = "1Ti"  # as if someone raised it by hand
    harness.kube.apply(quota, force=True)
    harness.kube.reset_calls()

    harness.run()
    assert quota_hard(harness)["limits.memory"] == "512Gi"
    assert [call.kind for call in harness.kube.mutations()] == ["ResourceQuota"]
