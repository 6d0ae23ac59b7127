"""Faults on the in-memory port: a worker killed between any two calls, and transient errors
(409, 429 with Retry-After, 500, connection reset, timeout) at every call, still converge to
exactly one set of objects."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.clusters import conditions as cond
from app.database.core import Database
from app.kube import manifests
from app.kube.errors import TransientKubeError
from app.reconcilers.clusters import ClusterReconciler
from app.workqueue.models import WorkItem
from tests.clusters.support import Harness, create
from tests.support.drive import run_due
from tests.support.tenancy import Tenancy

# Kubernetes calls of a first, uninterrupted provisioning pass (measured by the test below):
# the tenant's queue and the host's shared objects, then the cluster.
FIRST_PASS_CALLS = 39
EXPECTED_KINDS = sorted(["Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy",
                         "NetworkPolicy", "Queue", "Queue", "Queue", "Secret", "StatefulSet",
                         *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 5])


class WorkerKilled(BaseException):
    """Like SIGKILL: nothing in the worker may catch it."""


def kinds(harness: Harness) -> list[str]:
    return sorted(kind for kind, _ns, _name in harness.managed_objects())


def items(harness: Harness) -> list[WorkItem]:
    with harness.database.session() as db:
        return list(db.scalars(select(WorkItem)))


def held_by(harness: Harness, worker: str) -> set[tuple[str, str]]:
    """(kind, key) of the items whose lease ``worker`` holds."""
    return {(item.kind, item.key) for item in items(harness)
            if (item.lease_owner or "").startswith(f"{worker}/")}


def ready(harness: Harness, cluster_id: int) -> bool:
    cluster = harness.cluster(cluster_id)
    return cluster is not None and cond.is_true(cluster.conditions, cond.READY)


def test_the_first_pass_makes_the_expected_number_of_calls(
    harness: Harness, tenancy: Tenancy
) -> None:
    create(harness.database, tenancy)
    harness.run()
    assert len(harness.kube.calls) == FIRST_PASS_CALLS


@pytest.mark.parametrize("killed_at", range(FIRST_PASS_CALLS))
def test_a_worker_killed_between_any_two_calls_is_adopted_by_the_next(
    harness: Harness, tenancy: Tenancy, database: Database, killed_at: int
) -> None:
    created = create(harness.database, tenancy)
    harness.kube.inject("*", WorkerKilled(), after=killed_at)
    with pytest.raises(WorkerKilled):
        harness.run("worker-1")
    # A fresh worker process: nothing in memory survives, only the database and the host.
    successor = ClusterReconciler(harness.reconciler.settings, database, harness.connector,
                                  harness.installer, clock=harness.clock)
    held = held_by(harness, "worker-1")
    assert held, "the killed worker held no item"
    harness.clock.advance(30)
    run_due(successor, "worker-2")
    assert held <= held_by(harness, "worker-1")  # the dead worker's lease still holds
    harness.clock.advance(61)
    for _ in range(3):
        run_due(successor, "worker-2")
        harness.clock.advance(301)
    assert ready(harness, created.id)
    assert kinds(harness) == EXPECTED_KINDS


ERRORS = {
    "409": TransientKubeError("the object has been modified", reason="Conflict", status=409),
    "429": TransientKubeError("slow down", reason="TooManyRequests", status=429,
                              delay_seconds=7.0),
    "500": TransientKubeError("etcdserver: leader changed", reason="InternalError", status=500),
    "reset": ConnectionResetError(104, "Connection reset by peer"),
    "timeout": TimeoutError("timed out"),
}


@pytest.mark.parametrize("error", ERRORS, ids=str)
@pytest.mark.parametrize("failing_call", range(FIRST_PASS_CALLS))
def test_transient_errors_at_every_call_converge(
    harness: Harness, tenancy: Tenancy, error: str, failing_call: int
) -> None:
    created = create(harness.database, tenancy)
    harness.kube.inject("*", ERRORS[error], after=failing_call)
    harness.run()
    # The one that met the error says so, whichever kind it was (retried with backoff, or
    # behind its host's breaker, with those that wait for it); the cluster is not ready (it
    # failed, or waits for what did).
    assert [item for item in items(harness) if item.last_error]
    assert not ready(harness, created.id)
    harness.converge(2)
    assert ready(harness, created.id)
    assert kinds(harness) == EXPECTED_KINDS


def test_retry_after_is_honoured_and_backoff_grows(harness: Harness, tenancy: Tenancy) -> None:
    created = create(harness.database, tenancy)
    throttled = TransientKubeError("slow down", reason="TooManyRequests", status=429,
                                   delay_seconds=45.0)
    harness.kube.inject("apply", throttled, times=3, match=lambda call: call.kind == "Namespace")
    delays = []
    for _ in range(3):
        harness.run()
        cluster = harness.cluster(created.id)
        assert cluster is not None
        delays.append(harness.due_at(created.id) - harness.clock.now)
        harness.clock.advance(delays[-1].total_seconds())
        harness.clock.advance(-301)  # run() advances 301 s: land exactly when due
    assert all(delay >= timedelta(seconds=45) for delay in delays)
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.failed_attempts == 3
    condition = cond.find(cluster.conditions, cond.NAMESPACE_READY)
    assert condition is not None and condition["reason"] == "TooManyRequests"
    harness.converge(2)
    assert ready(harness, created.id)


def test_a_bug_in_a_builder_is_logged_and_retried_never_shown_to_the_tenant(
    harness: Harness, tenancy: Tenancy, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    created = create(harness.database, tenancy)

    def broken(*_: object) -> list[dict[str, object]]:
        raise ValueError("list index out of range")

    monkeypatch.setattr(manifests, "cluster_own_objects", broken)
    with caplog.at_level(logging.ERROR, logger="app.reconcilers.runtime"):
        harness.run()
    cluster = harness.cluster(created.id)
    assert cluster is not None
    shown = " ".join(str(c.get("message")) for c in cluster.conditions or [])
    assert "list index out of range" not in shown
    assert not cond.is_true(cluster.conditions, cond.FAILED)
    assert f"clusters {created.id}: reconcile failed" in caplog.text
    assert "ValueError: list index out of range" in (harness.item(created.id).last_error or "")
    monkeypatch.undo()
    harness.converge()
    assert ready(harness, created.id)


def test_a_spec_the_builders_refuse_is_shown_to_the_tenant(
    harness: Harness, tenancy: Tenancy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = create(harness.database, tenancy)

    def refused(*_: object) -> list[dict[str, object]]:
        raise manifests.InvalidSpec("tenant slug 'acme' collides with the root queue")

    monkeypatch.setattr(manifests, "cluster_own_objects", refused)
    harness.run()
    cluster = harness.cluster(created.id)
    assert cluster is not None
    failed = cond.find(cluster.conditions, cond.FAILED) or {}
    assert failed.get("reason") == "InvalidSpec"
    assert "collides with the root queue" in str(failed.get("message"))
