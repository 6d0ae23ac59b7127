"""The worker keeps the webhook's certificate and configuration current (on the in-memory fake).
The runtime's clock is the certificates' wall clock here."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.database.core import Database
from app.kit.config import Settings
from app.kube.errors import ApplyConflictError
from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_NAME
from app.kube.manifests.webhook import TLS_SECRET_NAME
from app.kube.memory import InMemoryKube
from app.kube.port import Manifest
from app.process.worker import build_kinds
from app.reconcilers.webhook import WebhookReconciler, serving_hosts
from app.webhook import certificates as certs
from app.webhook.secret import read_secret, unbase64
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector

NAMESPACE = "gpu-tenant-portal"
DAY = timedelta(days=1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class PreconditionKube(InMemoryKube):
    """The fake with the API server's resourceVersion precondition on apply, and a hook that
    runs just before a Secret is written (where another worker may get in first)."""

    before_secret_write: Callable[[], object] | None = None

    def apply(self, obj: Manifest, *, force: bool = False) -> Manifest:
        if obj["kind"] == "Secret" and self.before_secret_write is not None:
            hook, self.before_secret_write = self.before_secret_write, None
            hook()
        wanted = obj["metadata"].get("resourceVersion")
        live = self.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                        obj["metadata"].get("namespace"))
        if wanted is not None and (live is None or live["metadata"]["resourceVersion"] != wanted):
            raise ApplyConflictError("the object has been modified")
        return super().apply(obj, force=force)


@dataclass
class Clock:
    wall: datetime = T0

    def now(self) -> datetime:
        return self.wall

    def later(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)


def settings(**extra: Any) -> Settings:
    return Settings(env="test", database_url="sqlite://", worker_resync_seconds=300, **extra)


def reconciler(kube: InMemoryKube, database: Database, clock: Clock,
               **extra: Any) -> WebhookReconciler:
    return WebhookReconciler(settings(**extra), database, InMemoryConnector(kube),
                             now=clock.now)


def written(kube: InMemoryKube) -> list[str]:
    """The kinds of the objects written since the last reset, the namespace left out."""
    return [call.kind for call in kube.writes() if call.kind != "Namespace"]


def stored(kube: InMemoryKube) -> tuple[list[str], list[str], str]:
    """(Secret bundle, configuration caBundle, served certificate) as certificate lists."""
    secret = read_secret(kube.get("v1", "Secret", TLS_SECRET_NAME, NAMESPACE))
    config = kube.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                      WEBHOOK_CONFIGURATION_NAME)
    assert secret.pair is not None and config is not None
    ca_bundle = unbase64(config["webhooks"][0]["clientConfig"]["caBundle"])
    return secret.bundle, certs.bundle_certificates(ca_bundle), secret.pair.cert_pem


def events(database: Database) -> list[AuditEvent]:
    with database.session() as db:
        return list(db.scalars(select(AuditEvent).order_by(AuditEvent.id)))


def test_the_first_pass_issues_a_certificate_and_registers_the_webhook(
        sqlite_database: Database) -> None:
    kube, clock = PreconditionKube(), Clock()
    assert run_due(reconciler(kube, sqlite_database, clock), "w1") == 1  # the one key
    assert written(kube) == ["Secret", "MutatingWebhookConfiguration"]
    bundle, ca_bundle, served = stored(kube)
    assert bundle == ca_bundle == [served]
    config = kube.objects("MutatingWebhookConfiguration")[0]
    assert config["webhooks"][0]["clientConfig"]["service"] == {
        "name": "gpu-tenant-portal-webhook", "namespace": NAMESPACE, "port": 443,
        "path": "/mutate-pods"}
    secret = kube.get("v1", "Secret", TLS_SECRET_NAME, NAMESPACE)
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    [event] = events(sqlite_database)
    assert (event.action, event.actor_label, event.tenant_id) == (
        "webhook.certificate_issued", "webhook-reconciler", None)
    assert event.after is not None and set(event.after) == {"fingerprint_sha256", "not_after"}


def test_a_converged_webhook_costs_reads_only_and_waits_for_the_resync(
        sqlite_database: Database) -> None:
    kube, clock = PreconditionKube(), Clock()
    worker = reconciler(kube, sqlite_database, clock)
    run_due(worker, "w1")
    kube.reset_calls()
    assert run_due(worker, "w1") == 0 and kube.calls == []  # not due yet
    clock.later(301)
    assert run_due(worker, "w1") == 1
    assert kube.writes() == []


def test_a_deleted_configuration_comes_back_at_the_next_resync(
        sqlite_database: Database) -> None:
    kube, clock = PreconditionKube(), Clock()
    worker = reconciler(kube, sqlite_database, clock)
    run_due(worker, "w1")
    kube.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                WEBHOOK_CONFIGURATION_NAME)
    kube.reset_calls()
    clock.later(301)
    assert run_due(worker, "w1") == 1
    assert written(kube) == ["MutatingWebhookConfiguration"]
    bundle, ca_bundle, _ = stored(kube)
    assert bundle == ca_bundle


def test_rotation_keeps_both_certificates_trusted_then_drops_the_expired_one(
        sqlite_database: Database) -> None:
    kube, clock = PreconditionKube(), Clock()
    worker = reconciler(kube, sqlite_database, clock)
    run_due(worker, "w1")
    _, _, first = stored(kube)
    clock.wall = T0 + 61 * DAY
    kube.reset_calls()
    assert run_due(worker, "w1") == 1
    assert written(kube) == ["Secret", "MutatingWebhookConfiguration"]
    bundle, ca_bundle, second = stored(kube)
    assert second != first and bundle == ca_bundle == [first, second]
    assert events(sqlite_database)[-1].action == "webhook.certificate_rotated"
    clock.wall = T0 + 91 * DAY
    kube.reset_calls()
    assert run_due(worker, "w1") == 1
    # the Secret's bundle is pruned, then the caBundle
    assert written(kube) == ["Secret", "MutatingWebhookConfiguration"]
    assert stored(kube)[:2] == ([second], [second])


def test_two_workers_rotating_at_once_leave_secret_and_ca_bundle_agreeing(
        sqlite_database: Database) -> None:
    kube, clock = PreconditionKube(), Clock()
    run_due(reconciler(kube, sqlite_database, clock), "w0")
    clock.wall = T0 + 61 * DAY
    first, second = (reconciler(kube, sqlite_database, clock) for _ in range(2))
    # The queue's lease keeps a second worker off the key ...
    kube.before_secret_write = lambda: run_due(second, "w2")
    run_due(first, "w1")
    assert len([e for e in events(sqlite_database)
                if e.action == "webhook.certificate_rotated"]) == 1
    # ... but one that lost its lease mid-pass may still write: w2 rotates while w1 is mid-pass.
    clock.wall = T0 + 122 * DAY
    kube.before_secret_write = lambda: second.ensure(kube)
    first.ensure(kube)
    bundle, ca_bundle, served = stored(kube)
    assert bundle == ca_bundle and served in ca_bundle and len(bundle) == 2
    rotations = [e for e in events(sqlite_database) if e.action == "webhook.certificate_rotated"]
    assert len(rotations) == 2  # the loser started over and found nothing left to do


def test_a_url_puts_its_host_in_the_certificate_and_the_configuration() -> None:
    extra = {"webhook_url": "https://10.0.0.5:9443"}
    assert serving_hosts(settings(**extra)) == ["10.0.0.5"]
    assert serving_hosts(settings()) == [
        "gpu-tenant-portal-webhook.gpu-tenant-portal.svc",
        "gpu-tenant-portal-webhook.gpu-tenant-portal.svc.cluster.local"]
    assert serving_hosts(settings(webhook_hosts=["hook.example.com"])) == ["hook.example.com"]


def test_the_base_address_the_docs_ask_for_is_registered_with_the_webhooks_path(
        sqlite_database: Database) -> None:
    kube, clock = PreconditionKube(), Clock()
    worker = reconciler(kube, sqlite_database, clock,
                        webhook_url="https://webhook.example.com:9443")
    run_due(worker, "w1")
    config = kube.objects("MutatingWebhookConfiguration")[0]
    assert {hook["clientConfig"]["url"] for hook in config["webhooks"]} == {
        "https://webhook.example.com:9443/mutate-pods"}


@pytest.mark.parametrize(("url", "why"), [
    ("http://10.0.0.5:9443", "must start with https://"),
    ("https://10.0.0.5:9443/mutate-pods", "must be the base address, without /mutate-pods"),
    ("https://10.0.0.5:9443/mutate-pods/hosts/1", "must be the base address, without /mut"),
    ("https://10.0.0.5:9443/?a=1", "must not carry a query or a fragment"),
    ("https://10.0.0.5:9443/#top", "must not carry a query or a fragment")])
def test_a_webhook_url_that_cannot_work_is_refused_at_startup(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"PORTAL_WEBHOOK_URL {why}"):
        settings(webhook_url=url)


def test_without_a_host_cluster_nothing_happens(sqlite_database: Database) -> None:
    worker = WebhookReconciler(settings(), sqlite_database, InMemoryConnector(None))
    assert run_due(worker, "w1") == 0


def test_the_worker_runs_the_webhook_reconciler(sqlite_database: Database) -> None:
    names = [r.name for r in build_kinds(settings(), sqlite_database,
                                         InMemoryConnector(InMemoryKube()))]
    assert "webhook" in names


def test_the_private_key_never_reaches_the_audit_trail_or_the_configuration(
        sqlite_database: Database) -> None:
    kube, clock = PreconditionKube(), Clock()
    run_due(reconciler(kube, sqlite_database, clock), "w1")
    key = read_secret(kube.get("v1", "Secret", TLS_SECRET_NAME, NAMESPACE)).pair
    assert key is not None
    config = str(kube.objects("MutatingWebhookConfiguration"))
    marker = key.key_pem.splitlines()[1]
    assert marker not in config and base64.b64encode(key.key_pem.encode()).decode() not in config
    assert all(marker not in str(e.after) for e in events(sqlite_database))
