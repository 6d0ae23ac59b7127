"""Host clusters: register, describe, cordon/drain, check, delete; and the connector's view.

Platform admins only. Credentials come in, are checked, sealed with the portal's SecretBox and
never go out again: ``host_out`` shows their kind, server and when they were set. The only
decrypted form is the ``HostTarget`` handed to the Kubernetes connector.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.authz import ensure_platform_admin, ensure_platform_writer
from app.database.concurrency import insert_or_conflict
from app.database.core import utcnow
from app.hosts import credentials, repository
from app.hosts.health import ChartProbe, CheckResult, run_checks
from app.hosts.models import HostCluster
from app.hosts.schemas import (
    CredentialsOut,
    HealthCheckOut,
    HealthOut,
    HostCredentialsIn,
    HostOut,
    HostRegister,
    HostUpdate,
)
from app.hosts.webhook_route import host_path, route_of, routed
from app.http.pagination import Page, PageParams, paginate
from app.kit.config import Settings
from app.kit.crypto import SecretBox, UnreadableSecret
from app.kit.errors import Conflict, NotFound, ValidationFailed
from app.kit.webhook_address import called_url
from app.kube.connector import HostTarget, KubeConnector, probe
from app.kube.port import release
from app.workqueue import ALL, HOSTS, NODES, USAGE, WEBHOOK, enqueue

log = logging.getLogger(__name__)
TARGET_TYPE = "host_cluster"
NO_OPEN_HOST = ("no host cluster takes new clusters: every host is cordoned or draining; "
                "an admin uncordons one or registers another")


class NoHostAvailable(Conflict):
    pass


# ----- reading


def host_out(row: HostCluster) -> HostOut:
    checks = [HealthCheckOut(name=str(c.get("name")), passed=bool(c.get("passed")),
                             message=str(c.get("message") or ""))
              for c in row.health_checks or [] if isinstance(c, dict)]
    return HostOut(
        id=row.id, name=row.name, region=row.region, description=row.description,
        state=row.state,
        is_default=row.is_default, takes_new_clusters=row.takes_new_clusters,
        credentials=CredentialsOut(kind=row.credential_kind,
                                   server=row.api_endpoint, set_at=row.credentials_set_at),
        kube_qps=row.kube_qps, kube_burst=row.kube_burst,
        webhook_url=row.webhook_url, webhook_endpoint=webhook_endpoint(row),
        health=HealthOut(reachable=row.health_reachable, checked_at=row.health_checked_at,
                         checks=checks),
        created_at=row.created_at, updated_at=row.updated_at,
    )


def webhook_endpoint(row: HostCluster) -> str:
    if row.webhook_url:
        return called_url(row.webhook_url, host_path(row.id))
    return "environment" if row.is_default and row.credential_kind == "env" else ""


def list_hosts(db: Session, principal: Principal,
               paging: PageParams | None = None) -> Page[HostOut]:
    ensure_platform_admin(principal)
    rows, cursor = paginate(db, select(HostCluster), HostCluster.id,
                            paging or PageParams(limit=200))
    return Page(items=[host_out(row) for row in rows], next_cursor=cursor)


def get_host(db: Session, principal: Principal, name: str) -> HostOut:
    ensure_platform_admin(principal)
    return host_out(_host(db, name))


def _host(db: Session, name: str, *, lock: bool = False) -> HostCluster:
    row = repository.host_by_name(db, name, lock=lock)
    if row is None:
        raise NotFound(f"no host cluster {name!r}")
    return row


# ----- changing


def register_host(db: Session, principal: Principal, settings: Settings,
                  payload: HostRegister) -> HostOut:
    ensure_platform_writer(principal)
    checked = _checked(payload.credentials)
    taken = Conflict(f"a host cluster named {payload.name!r} exists already",
                     errors=[{"field": "name", "message": "this name is taken"}])
    if repository.host_by_name(db, payload.name) is not None:
        raise taken
    row = HostCluster(
        name=payload.name, region=payload.region, description=payload.description,
        kube_qps=payload.kube_qps, kube_burst=payload.kube_burst, state="active",
        webhook_url=payload.webhook_url,
        is_default=False, health_checks=[],
    )
    _store_credentials(row, settings, checked)
    insert_or_conflict(db, row, taken)
    _record(db, principal, "host_cluster.register", row, None, _details(row))
    _look_now(db, row)
    return host_out(row)


def update_host(db: Session, principal: Principal, name: str, payload: HostUpdate) -> HostOut:
    ensure_platform_writer(principal)
    row = _host(db, name, lock=True)
    before = _details(row)
    changes: dict[str, Any] = payload.model_dump(exclude_unset=True)
    for key in ("name", "region", "description"):
        if changes.get(key) is None:
            changes.pop(key, None)  # null for these means "unchanged"
    renamed = changes.get("name", row.name) != row.name
    if renamed and repository.host_by_name(db, changes["name"]) is not None:
        raise Conflict(f"a host cluster named {changes['name']!r} exists already",
                       errors=[{"field": "name", "message": "this name is taken"}])
    for key, value in changes.items():
        setattr(row, key, value)
    row.updated_at = utcnow()
    db.flush()
    _record(db, principal, "host_cluster.update", row, before, _details(row))
    _look_now(db, row)
    return host_out(row)


def replace_credentials(db: Session, principal: Principal, settings: Settings, name: str,
                        payload: HostCredentialsIn) -> HostOut:
    ensure_platform_writer(principal)
    checked = _checked(payload)
    row = _host(db, name, lock=True)
    if row.is_default and row.credential_kind == "env":
        raise Conflict(f"{row.name!r} uses the environment's credentials "
                       "(PORTAL_KUBECONFIG or in-cluster config): change those, or register "
                       "the cluster as another host")
    before = _details(row)
    _store_credentials(row, settings, checked)
    row.health_reachable, row.health_checks, row.health_checked_at = None, [], None
    _record(db, principal, "host_cluster.credentials_replace", row, before, _details(row))
    _look_now(db, row)
    return host_out(row)


def set_state(db: Session, principal: Principal, name: str, state: str,
              reason: str = "") -> HostOut:
    """cordon / uncordon (back to active) / drain. Draining marks the host for evacuation:
    moving its clusters elsewhere is not automated."""
    ensure_platform_writer(principal)
    row = _host(db, name, lock=True)
    before = _details(row)
    if row.state != state:
        row.state = state
        row.updated_at = utcnow()
        if state == "active":
            _look_now(db, row)
    after = {**_details(row), **({"reason": reason} if reason else {})}
    action = {"active": "uncordon", "cordoned": "cordon", "draining": "drain"}[state]
    _record(db, principal, f"host_cluster.{action}", row, before, after)
    return host_out(row)


def delete_host(db: Session, principal: Principal, name: str) -> None:
    ensure_platform_writer(principal)
    row = _host(db, name, lock=True)
    if row.is_default:
        raise Conflict(f"{row.name!r} is the environment's host (PORTAL_KUBECONFIG): it "
                       "cannot be deleted; cordon it instead")
    found = repository.references(db, row.id)
    if found:
        listed = ", ".join(f"{count} {table}" for table, count in sorted(found.items()))
        raise Conflict(f"{row.name!r} is still referenced ({listed}): move or delete those "
                       "first")
    before = _details(row)
    db.delete(row)
    db.flush()
    _record(db, principal, "host_cluster.delete", row, before, None)


def check_host(db: Session, principal: Principal, settings: Settings,
               connector: KubeConnector, charts: ChartProbe | None, name: str) -> HostOut:
    """"Check now": runs every health check against the host and stores the results."""
    ensure_platform_writer(principal)
    target = target_for(_host(db, name), settings)
    # The checks call the host for seconds: no transaction stays open meanwhile (on SQLite,
    # whose write sessions begin IMMEDIATE, that would be the one write lock).
    db.commit()
    results = (checks_of(target, settings, connector, charts) if target is not None
               else run_checks(None, settings, charts))
    row = _host(db, name)
    store_health(row, results)
    _record(db, principal, "host_cluster.check", row, None,
            {"name": row.name, "reachable": row.health_reachable,
             "failed": [r.name for r in results if not r.passed]})
    return host_out(row)


def checks_of(target: HostTarget, settings: Settings, connector: KubeConnector,
              charts: ChartProbe | None) -> list[CheckResult]:
    """The checks through a probing client of its own, closed after."""
    try:
        port = probe(connector, target)
    except Exception as error:  # stored credentials the client cannot use: a failed check
        return [CheckResult("api-reachable", False, "the client cannot be built from the "
                            f"credentials ({type(error).__name__})"),
                *run_checks(None, settings, charts,
                           webhook_routed=routed(target))[1:]]
    try:
        return run_checks(port, settings, charts, webhook_routed=routed(target),
                          route=route_of(target, settings))
    finally:
        if port is not connector.host():
            release(port)


def store_health(row: HostCluster, results: list[CheckResult]) -> None:
    _log_changed_checks(row, results)
    row.health_checks = [r.as_json() for r in results]
    row.health_reachable = next((r.passed for r in results if r.name == "api-reachable"),
                                False)
    row.health_checked_at = utcnow()


def _log_changed_checks(row: HostCluster, results: list[CheckResult]) -> None:
    """A check that starts failing (or fails for another reason) is a warning in the log, once:
    an operator reading the log learns what the host's page says, without a line every resync."""
    before = {str(c.get("name")): c for c in row.health_checks or []}
    for result in results:
        earlier = before.get(result.name)
        if not result.passed and (earlier is None or earlier.get("passed")
                                  or earlier.get("message") != result.message):
            log.warning("host cluster %s: check %s failed: %s", row.name, result.name,
                        result.message)
        elif result.passed and earlier is not None and not earlier.get("passed"):
            log.info("host cluster %s: check %s passes again: %s", row.name, result.name,
                     result.message)


# ----- placement's part: which host a new cluster may go to


def host_for_new_cluster(db: Session) -> HostCluster:
    """The default host while it is active, else the oldest active host; cordoned and
    draining hosts take none (409 when no host can)."""
    repository.ensure_default_host(db)
    row = repository.first_open_host(db)
    if row is None:
        raise NoHostAvailable(NO_OPEN_HOST, errors=[{"field": "host_cluster",
                                                     "message": NO_OPEN_HOST}])
    return row


# ----- the connector's view


def target_for(row: HostCluster, settings: Settings) -> HostTarget | None:
    """None for a host the portal cannot reach: no stored credentials, and not the one the
    environment's credentials stand for (only the default host is)."""
    kubeconfig = None
    if row.credential_kind != "env" and row.credentials_encrypted:
        kubeconfig = SecretBox.from_settings(settings).open(row.credentials_encrypted)
    elif not row.is_default:
        return None
    return HostTarget(host_id=row.id, name=row.name, kubeconfig_yaml=kubeconfig,
                      qps=row.kube_qps, burst=row.kube_burst, webhook_url=row.webhook_url)


def targets(db: Session, settings: Settings, *, only_open: bool = False) -> list[HostTarget]:
    """Every reachable registered host as the connector reaches it (the default one made if
    missing); with ``only_open``, only those that take new clusters (active). A host whose
    credentials no key opens is left out, and logged: the others go on."""
    repository.ensure_default_host(db)
    found: list[HostTarget] = []
    for row in repository.all_hosts(db):
        if only_open and row.state != "active":
            continue
        try:
            target = target_for(row, settings)
        except UnreadableSecret as error:
            log.error("host cluster %s: %s", row.name, error)
            continue
        if target is not None:
            found.append(target)
    return found


# ----- internals


def _checked(payload: HostCredentialsIn) -> credentials.CheckedCredentials:
    if payload.kind == "kubeconfig":
        if not payload.kubeconfig:
            raise _missing("credentials.kubeconfig")
        return credentials.from_kubeconfig(payload.kubeconfig)
    for field_name in ("server", "token", "ca_certificate"):
        if not getattr(payload, field_name):
            raise _missing(f"credentials.{field_name}")
    assert payload.server and payload.token and payload.ca_certificate
    return credentials.from_token(payload.server, payload.token, payload.ca_certificate)


def _missing(field_name: str) -> ValidationFailed:
    return ValidationFailed.on_field(field_name, "required for this kind of credentials")


def _store_credentials(row: HostCluster, settings: Settings,
                       checked: credentials.CheckedCredentials) -> None:
    row.credentials_encrypted = SecretBox.from_settings(settings).seal(checked.kubeconfig_yaml)
    row.credential_kind = checked.kind
    row.api_endpoint = checked.server
    row.credentials_set_at = row.updated_at = utcnow()


def _details(row: HostCluster) -> dict[str, Any]:
    """What the audit trail keeps of a host: never its credentials."""
    return {"name": row.name, "region": row.region, "description": row.description,
            "state": row.state, "kube_qps": row.kube_qps, "kube_burst": row.kube_burst,
            "webhook_url": row.webhook_url,
            "credential_kind": row.credential_kind, "server": row.api_endpoint,
            "credentials_set_at": (row.credentials_set_at.isoformat()
                                   if row.credentials_set_at else None)}


def _look_now(db: Session, row: HostCluster) -> None:
    """The worker looks at a registered, edited or re-enabled host at once, not at its next
    resync: its nodes, its health, its GPU use, and the admission webhook (whose one key
    covers every host: the certificate and each host's configuration go in order)."""
    for kind in (NODES, HOSTS, USAGE):
        enqueue(db, kind, row.id)
    enqueue(db, WEBHOOK, ALL)


def _record(db: Session, principal: Principal, action: str, row: HostCluster,
            before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    audit.record(db, action=action, actor_id=principal.user_id, actor_label=principal.label,
                 target_type=TARGET_TYPE, target_id=row.id, target_label=f"host {row.name}",
                 before=before, after=after)
