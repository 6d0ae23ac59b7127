"""The worker side of the admission webhook: its serving certificate and its configuration.

Each pass reads the TLS Secret in the portal's namespace, issues a certificate when there is none
or a third of its lifetime is left, and derives the configuration's caBundle from the Secret's
bundle. Several workers may run at once, so:

- the Secret is applied with the resourceVersion it was read at: of two workers rotating at
  once, one gets a conflict and starts over from what the other wrote;
- after applying the configuration, the Secret is read again; if it changed meanwhile, the pass
  repeats, so the last caBundle written always matches the last Secret written;
- the webhook itself only switches to a certificate that the configuration already trusts.

One gap is left: two workers creating the very first Secret at once (there is no version to
compare yet). They converge on the last write, and the webhook may serve the other certificate
until its next reload (a minute); before that first pass there was no webhook at all.

A pass runs every ``worker_resync_seconds``, sooner after a failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from app.audit import service as audit
from app.config import Settings
from app.db import Database
from app.kube.connector import KubeConnector
from app.kube.errors import ApplyConflictError, KubeError, TransientKubeError
from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_NAME, kai_queue_webhook
from app.kube.manifests.webhook import TLS_SECRET_NAME, portal_namespace, webhook_tls_secret
from app.kube.port import KubePort
from app.kube.quantities import drifted
from app.webhook import certificates as certs
from app.webhook.secret import StoredPair, read_secret

log = logging.getLogger(__name__)
ACTOR = "webhook-reconciler"
ATTEMPTS = 3
MAX_RETRY_SECONDS = 300.0
_MWC = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")


def serving_hosts(settings: Settings) -> list[str]:
    """The names the serving certificate must carry: how the API server reaches the webhook."""
    if settings.webhook_hosts:
        return list(settings.webhook_hosts)
    if settings.webhook_url:
        host = urlsplit(settings.webhook_url).hostname
        if host:
            return [host]
    service = f"{settings.webhook_service_name}.{settings.webhook_namespace}.svc"
    return [service, f"{service}.cluster.local"]


class WebhookReconciler:
    name = "webhook"

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.database = database
        self.kube = kube
        self.settings = settings
        self.hosts = serving_hosts(settings)
        self.lifetime = timedelta(days=settings.webhook_certificate_days)
        self.resync_seconds = settings.worker_resync_seconds
        self.clock = clock
        self.now = now
        self._next_pass = 0.0
        self._failures = 0

    def run_due(self, worker_id: str) -> int:
        host = self.kube.host()
        if host is None or self.clock() < self._next_pass:
            return 0
        try:
            written = self.reconcile(host)
        except KubeError as error:
            self._failures += 1
            self._next_pass = self.clock() + self._delay(error)
            log.warning("the admission webhook's certificate or configuration could not be "
                        "ensured (%s: %s); retrying later", error.reason, error.message)
            return 0
        self._failures = 0
        self._next_pass = self.clock() + self.resync_seconds
        return written

    def reconcile(self, host: KubePort) -> int:
        """One pass; returns how many objects it wrote."""
        written = 0
        for _ in range(ATTEMPTS):
            try:
                stored, wrote = self._ensure_secret(host)
                written += wrote + self._ensure_configuration(host, "".join(stored.bundle))
            except ApplyConflictError:
                continue  # another worker wrote the Secret since we read it: start over
            if self._secret_version(host) == stored.resource_version:
                return written
        raise TransientKubeError("the webhook Secret kept changing during the pass",
                                 reason="Conflict")

    # ----- the Secret

    def _ensure_secret(self, host: KubePort) -> tuple[StoredPair, int]:
        live = host.get("v1", "Secret", TLS_SECRET_NAME, self.settings.webhook_namespace)
        stored, now = read_secret(live), self.now()
        if stored.pair is None or certs.rotation_due(stored.pair.cert_pem, self.hosts, now):
            if live is None:
                host.apply(portal_namespace(self.settings.webhook_namespace), force=True)
            return self._rotate(host, stored, now), 1
        bundle = certs.trusted_bundle([*stored.bundle, stored.pair.cert_pem], now)
        if certs.bundle_certificates(bundle) == stored.bundle:
            return stored, 0
        return self._write(host, stored.pair, bundle, stored.resource_version), 1

    def _rotate(self, host: KubePort, stored: StoredPair, now: datetime) -> StoredPair:
        fresh = certs.issue(self.hosts, now, self.lifetime)
        previous = [stored.pair.cert_pem] if stored.pair else []
        # Both stay trusted until the previous one expires: the webhook may still serve it.
        bundle = certs.trusted_bundle([*previous, fresh.cert_pem], now)
        written = self._write(host, fresh, bundle, stored.resource_version)
        self._audit(stored.pair, fresh)
        return written

    def _write(self, host: KubePort, pair: certs.ServingCertificate, bundle: str,
               resource_version: str | None) -> StoredPair:
        secret = webhook_tls_secret(
            self.settings.webhook_namespace, cert_pem=pair.cert_pem, key_pem=pair.key_pem,
            bundle_pem=bundle, resource_version=resource_version)
        return read_secret(host.apply(secret, force=True))

    def _secret_version(self, host: KubePort) -> str | None:
        live = host.get("v1", "Secret", TLS_SECRET_NAME, self.settings.webhook_namespace)
        return None if live is None else (live.get("metadata") or {}).get("resourceVersion")

    def _audit(self, previous: certs.ServingCertificate | None,
               fresh: certs.ServingCertificate) -> None:
        action = "webhook.certificate_rotated" if previous else "webhook.certificate_issued"
        log.info("%s: serving certificate %s, valid until %s", action,
                 certs.fingerprint(fresh.cert_pem), certs.not_after(fresh.cert_pem).isoformat())
        with self.database.transaction() as db:
            audit.record(db, action=action, actor_id=None, actor_label=ACTOR, tenant_id=None,
                         target_type="webhook_certificate",
                         target_id=f"{self.settings.webhook_namespace}/{TLS_SECRET_NAME}",
                         before=_described(previous), after=_described(fresh))

    # ----- the configuration

    def _ensure_configuration(self, host: KubePort, bundle: str) -> int:
        wanted = kai_queue_webhook(
            bundle, url=self.settings.webhook_url,
            service_name=self.settings.webhook_service_name,
            service_namespace=self.settings.webhook_namespace)
        live = host.get(*_MWC, WEBHOOK_CONFIGURATION_NAME)
        if not drifted(live, wanted):
            return 0
        host.apply(wanted, force=True)
        return 1

    def _delay(self, error: KubeError) -> float:
        if isinstance(error, TransientKubeError) and error.delay_seconds is not None:
            return min(error.delay_seconds, MAX_RETRY_SECONDS)
        return min(2.0 ** self._failures, MAX_RETRY_SECONDS, self.resync_seconds)


def _described(pair: certs.ServingCertificate | None) -> dict[str, Any] | None:
    """What the audit trail says about a certificate: never the key."""
    if pair is None:
        return None
    return {"fingerprint_sha256": certs.fingerprint(pair.cert_pem),
            "not_after": certs.not_after(pair.cert_pem).isoformat()}
