"""The admission webhook: its serving certificate and its configuration on every host, one key.

A reconcile reads the TLS Secret in the portal's namespace, issues a certificate when there is
none or a third of its lifetime is left, and derives the configuration's caBundle from the
Secret's bundle. The runtime holds the one key ("all") for one worker at a time; a worker that
lost its lease mid-pass may still race another, so:

- the Secret is applied with the resourceVersion it was read at: of two workers rotating at
  once, one gets a conflict and starts over from what the other wrote;
- after applying the configuration, the Secret is read again; if it changed meanwhile, the pass
  repeats, so the last caBundle written always matches the last Secret written;
- the webhook itself only switches to a certificate that the configuration already trusts.

One gap is left: two workers creating the very first Secret at once (there is no version to
compare yet). They converge on the last write, and the webhook may serve the other certificate
until its next reload (a minute); before that first pass there was no webhook at all.

The Secret lives on the environment's host. The configuration goes to every registered host the
portal can reach, each through its own client, with that host's way to the webhook
(app/hosts/webhook_route.py) and the same caBundle; the environment's host's configuration is
written last, since the webhook's switch to a new certificate waits for that one. That order is
why the kind has one key rather than one per host: a host's configuration written after the
webhook switched would not trust the certificate it serves. A host without a webhook URL gets
none (one left from before is removed).

The runtime reconciles the key at every resync period, and at once when the hosts service
registers, edits or re-enables a host. A host that fails does not stop the others: the key is
retried with the runtime's backoff, and a host that does not answer opens its breaker (the
others' passes skip it until the breaker's backoff ends). A failure on the environment's host
fails the pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.database.core import Database, utcnow
from app.hosts import service as hosts_service
from app.hosts.webhook_route import WebhookRoute, environment_route, route_of
from app.kit.config import Settings
from app.kube.connector import HostTarget, KubeConnector, for_host
from app.kube.errors import ApplyConflictError, KubeError, PermanentKubeError, TransientKubeError
from app.kube.manifests import labels as lbl
from app.kube.manifests.admission import (
    WEBHOOK_CONFIGURATION_KIND,
    WEBHOOK_CONFIGURATION_NAME,
    kai_queue_webhook,
)
from app.kube.manifests.webhook import TLS_SECRET_NAME, portal_namespace, webhook_tls_secret
from app.kube.port import KubePort
from app.kube.quantities import drifted
from app.reconcilers.breaker import HostBreakers
from app.reconcilers.host_keys import failure, unreachable, wait_for_breaker
from app.reconcilers.kind import DONE, GONE, Context, Outcome, RetryLater, TerminalError
from app.webhook import certificates as certs
from app.webhook.secret import StoredPair, read_secret
from app.workqueue import ALL, WEBHOOK

log = logging.getLogger(__name__)
ACTOR = "webhook-reconciler"
ATTEMPTS = 3
# The kind's one key: the Secret and every host's configuration, in order.
KEY = ALL


def serving_hosts(settings: Settings, routes: Iterable[WebhookRoute] = ()) -> list[str]:
    """The names the serving certificate must carry: how each API server reaches the webhook
    (the environment's host's, then each other host's URL host)."""
    if settings.webhook_hosts:
        names = list(settings.webhook_hosts)
    elif settings.webhook_url:
        host = urlsplit(settings.webhook_url).hostname
        names = [host] if host else []
    else:
        service = f"{settings.webhook_service_name}.{settings.webhook_namespace}.svc"
        names = [service, f"{service}.cluster.local"]
    for route in routes:
        if route.hostname and route.hostname not in names:
            names.append(route.hostname)
    return names


Plan = list[tuple[HostTarget, WebhookRoute | None]]


class WebhookReconciler:
    name = WEBHOOK

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 now: Callable[[], datetime] = utcnow) -> None:
        self.database = database
        self.kube = kube
        self.settings = settings
        self.hosts = serving_hosts(settings)
        self.lifetime = timedelta(days=settings.webhook_certificate_days)
        self.resync_seconds = settings.worker_resync_seconds
        # The certificates' clock, and the runtime's when it runs alone.
        self.now = now

    def keys(self, db: Session) -> list[str]:
        """One key, while there is an environment's host to keep the Secret on."""
        return [KEY] if self.kube.host() is not None else []

    def reconcile(self, key: str, context: Context) -> Outcome:
        host = self.kube.host()
        if host is None:
            return GONE
        plan = self.plan()
        here = next((target for target, _ in plan if target.from_environment), None)
        if here is not None:
            wait_for_breaker(context, here.host_id)
        failed: dict[str, KubeError | Exception] = {}
        try:
            self.ensure(host, plan, check=context.lease.check, breakers=context.hosts,
                        failed=failed)
        except KubeError as error:
            log.warning("the admission webhook's certificate or configuration could not be "
                        "ensured (%s: %s)", error.reason, error.message)
            if here is None:
                raise RetryLater(f"ensuring the admission webhook failed ({error.reason}: "
                                 f"{error.message})") from error
            raise failure(here, error, "ensuring the admission webhook") from error
        if here is not None:
            context.hosts.reached(here.host_id)
        if failed:
            raise _hosts_failed(failed)
        return DONE

    def plan(self) -> Plan:
        """Every registered host the portal can reach, with its way to the webhook (None: it
        has none). Cordoned and draining hosts too: their clusters' pods still need it."""
        with self.database.transaction() as db:
            targets = hosts_service.targets(db, self.settings)
        return [(target, route_of(target, self.settings)) for target in targets]

    def ensure(self, host: KubePort, plan: Plan | None = None, *,
               check: Callable[[], None] = lambda: None, breakers: HostBreakers | None = None,
               failed: dict[str, KubeError | Exception] | None = None) -> int:
        """One pass; returns how many objects it wrote. ``host`` is the environment's host,
        where the Secret lives; ``plan`` the hosts to register the webhook on (None: the
        environment's host only). ``check`` stops the pass before each host's writes when the
        lease is lost; ``breakers`` skip hosts that do not answer; the other hosts that failed
        are put in ``failed``, by name."""
        plan = plan or []
        routes = [route for _, route in plan if route is not None]
        here = next((route for target, route in plan if target.from_environment), None)
        self.hosts = serving_hosts(self.settings, routes)
        others = _Others(self, plan, check, breakers,
                         failed if failed is not None else {})
        written = 0
        for _ in range(ATTEMPTS):
            try:
                check()
                stored, wrote = self._ensure_secret(host)
                bundle = "".join(stored.bundle)
                # The environment's host last: the webhook serves a new certificate once that
                # configuration trusts it, by then every other reachable host's does too.
                written += wrote + others.ensure(bundle)
                check()
                written += self._ensure_configuration(
                    host, bundle, here or environment_route(self.settings))
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

    def _ensure_configuration(self, host: KubePort, bundle: str, route: WebhookRoute) -> int:
        wanted = kai_queue_webhook(
            bundle, url=route.url,
            service_name=self.settings.webhook_service_name,
            service_namespace=self.settings.webhook_namespace)
        live = host.get(*WEBHOOK_CONFIGURATION_KIND, WEBHOOK_CONFIGURATION_NAME)
        if not drifted(live, wanted):
            return 0
        host.apply(wanted, force=True)
        return 1

    def register_on(self, target: HostTarget, port: KubePort, bundle: str,
                 route: WebhookRoute) -> int:
        first = port.get(*WEBHOOK_CONFIGURATION_KIND, WEBHOOK_CONFIGURATION_NAME) is None
        written = self._ensure_configuration(port, bundle, route)
        if first and written:
            self._audit_host(target, "webhook.configuration_registered", {"url": route.url})
        return written

    def remove_from(self, target: HostTarget, port: KubePort) -> int:
        """A host without a webhook URL (any more) keeps no configuration pointing at an
        address it may not reach, with a caBundle nobody updates: its shared-pool pods are
        refused by the queue guard instead, and its health check says why."""
        live = port.get(*WEBHOOK_CONFIGURATION_KIND, WEBHOOK_CONFIGURATION_NAME)
        managed = ((live or {}).get("metadata") or {}).get("labels") or {}
        if live is None or managed.get(lbl.MANAGED_BY) != lbl.MANAGED_BY_VALUE:
            return 0
        port.delete(*WEBHOOK_CONFIGURATION_KIND, WEBHOOK_CONFIGURATION_NAME)
        log.warning("host cluster %s has no webhook URL: its admission webhook configuration "
                    "is removed", target.name)
        self._audit_host(target, "webhook.configuration_removed",
                         {"reason": "no webhook URL is set for the host"})
        return 1

    def _audit_host(self, target: HostTarget, action: str, after: dict[str, Any]) -> None:
        with self.database.transaction() as db:
            audit.record(db, action=action, actor_id=None, actor_label=ACTOR, tenant_id=None,
                         target_type="host_cluster", target_id=target.host_id,
                         target_label=f"host {target.name}", before=None,
                         after={"host_cluster": target.name, **after})

def _described(pair: certs.ServingCertificate | None) -> dict[str, Any] | None:
    """What the audit trail says about a certificate: never the key."""
    if pair is None:
        return None
    return {"fingerprint_sha256": certs.fingerprint(pair.cert_pem),
            "not_after": certs.not_after(pair.cert_pem).isoformat()}


class _Others:
    """The configuration on every other host, each with its own client; one that fails is
    noted in ``failed`` and the others go on. A host whose breaker is open is skipped."""

    def __init__(self, owner: WebhookReconciler, plan: Plan, check: Callable[[], None],
                 breakers: HostBreakers | None,
                 failed: dict[str, KubeError | Exception]) -> None:
        self.owner = owner
        self.plan = plan
        self.check = check
        self.breakers = breakers
        self.failed = failed

    def ensure(self, bundle: str) -> int:
        written = 0
        for target, route in self.plan:
            if target.from_environment:
                continue
            if self.breakers is not None and self.breakers.open_until(target.host_id):
                self.failed[target.name] = RetryLater(f"host cluster {target.name} does not "
                                                      "answer; skipped until it does")
                continue
            self.check()
            self.failed.pop(target.name, None)
            try:
                written += self._one(target, route, bundle)
            except KubeError as error:
                log.warning("the admission webhook could not be registered on host cluster "
                            "%s (%s: %s); retrying later", target.name, error.reason,
                            error.message)
                self.failed[target.name] = error
                if self.breakers is not None and unreachable(error):
                    self.breakers.trip(target.host_id)
            except Exception as error:  # credentials the client cannot use: this host only
                log.error("the admission webhook could not be registered on host cluster %s "
                          "(%s)", target.name, type(error).__name__)
                self.failed[target.name] = error
        return written

    def _one(self, target: HostTarget, route: WebhookRoute | None, bundle: str) -> int:
        port = for_host(self.owner.kube, target)
        if port is None:
            return 0
        written = (self.owner.register_on(target, port, bundle, route) if route is not None
                   else self.owner.remove_from(target, port))
        if self.breakers is not None:
            self.breakers.reached(target.host_id)
        return written


def _hosts_failed(failed: dict[str, KubeError | Exception]) -> Exception:
    """Other hosts that failed, as the runtime takes them: a retry with backoff while any may
    pass on a retry, else (refused, or credentials the client cannot use) the resync."""
    listed = ", ".join(f"{name} ({_said(error)})" for name, error in sorted(failed.items()))
    message = f"the admission webhook could not be registered on host clusters {listed}"
    if all(isinstance(e, PermanentKubeError) or not isinstance(e, (KubeError, RetryLater))
           for e in failed.values()):
        return TerminalError(message)
    return RetryLater(message)


def _said(error: Exception) -> str:
    if isinstance(error, KubeError):
        return f"{error.reason}: {error.message}"
    if isinstance(error, RetryLater):
        return str(error)
    return type(error).__name__
