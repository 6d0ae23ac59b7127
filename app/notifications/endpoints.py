"""Webhook endpoints as people manage them: a tenant's admins their tenant's, platform admins the
platform's (``tenant`` None). Callers own the transaction; every change is audited.

A URL is checked when it is registered (``app/kit/outbound.py``: https, and every address its
name resolves to a public one unless the operator allows its network) and again by the worker
on every attempt. The signing secret is returned once, by the call that makes it (create,
roll), and is never logged, shown or audited after.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.authz import ensure_platform_admin, ensure_platform_writer
from app.database.core import utcnow
from app.kit import outbound
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kit.errors import Conflict, Forbidden, NotFound, ValidationFailed
from app.notifications import emit, endpoint_views, kinds, signing
from app.notifications.endpoint_schemas import (
    EndpointCreate,
    EndpointCreated,
    EndpointOut,
    EndpointUpdate,
    SecretRolled,
    TestSent,
)
from app.notifications.kinds import KINDS
from app.notifications.models import Notification, WebhookEndpoint
from app.tenants.access import tenant_for, who_can_help
from app.tenants.models import Tenant

TARGET_TYPE = "webhook_endpoint"
# How long a rolled secret's predecessor still signs: time for a receiver to move over.
ROLL_OVERLAP = timedelta(hours=24)
ENDPOINTS_MAX = 20
# The resolver the registration check uses (tests give one of their own).
resolve: outbound.Resolver = socket.getaddrinfo


def owner(db: Session, principal: Principal, slug: str | None, *, write: bool) -> Tenant | None:
    """The tenant whose endpoints these are (None: the platform's), once the caller may see
    (``write``: change) them: a tenant's admins or a platform admin; 404 for another tenant."""
    if slug is None:
        (ensure_platform_writer if write else ensure_platform_admin)(principal)
        return None
    tenant = tenant_for(db, principal, slug, "manage" if write else "read")
    if not principal.is_platform_admin and principal.roles.get(tenant.id) != "admin":
        raise Forbidden(f"only admins of {slug!r} manage its webhooks; "
                        f"{who_can_help(db, tenant, 'manage')}")
    return tenant


def list_endpoints(db: Session, principal: Principal, slug: str | None) -> list[EndpointOut]:
    tenant = owner(db, principal, slug, write=False)
    rows = db.scalars(select(WebhookEndpoint).where(_owned_by(tenant))
                      .order_by(WebhookEndpoint.id)).all()
    return endpoint_views.described(db, rows, _slug(tenant))


def get_endpoint(db: Session, principal: Principal, slug: str | None,
                 endpoint_id: int) -> EndpointOut:
    tenant = owner(db, principal, slug, write=False)
    return _view(db, _endpoint(db, tenant, endpoint_id), tenant)


def create_endpoint(db: Session, principal: Principal, slug: str | None,
                    payload: EndpointCreate, settings: Settings) -> EndpointCreated:
    tenant = owner(db, principal, slug, write=True)
    _check_url(payload.url, settings)
    chosen = _checked_kinds(payload.kinds, tenant)
    count = len(db.scalars(select(WebhookEndpoint.id).where(_owned_by(tenant))).all())
    if count >= ENDPOINTS_MAX:
        raise Conflict(f"at most {ENDPOINTS_MAX} webhook endpoints each: delete one first")
    secret = signing.new_secret()
    row = WebhookEndpoint(tenant_id=tenant.id if tenant else None, name=payload.name,
                          url=payload.url, format=payload.format, kinds=chosen,
                          secret_sealed=SecretBox.from_settings(settings).seal(secret),
                          created_by_id=principal.user_id, created_at=utcnow())
    db.add(row)
    db.flush()
    _audit(db, principal, "webhook_endpoint.create", row, after=_audited(row))
    view = _view(db, row, tenant)
    return EndpointCreated(**view.model_dump(), secret=secret)


def update_endpoint(db: Session, principal: Principal, slug: str | None, endpoint_id: int,
                    payload: EndpointUpdate, settings: Settings) -> EndpointOut:
    tenant = owner(db, principal, slug, write=True)
    row = _endpoint(db, tenant, endpoint_id, lock=True)
    before = _audited(row)
    given = payload.model_fields_set
    if payload.url is not None and payload.url != row.url:
        _check_url(payload.url, settings)
        row.url = payload.url
        # A new address starts with a clean record: the old one's failures were not its own.
        row.state, row.failing_since, row.consecutive_failures = "ok", None, 0
        row.last_error = ""
    if payload.name is not None:
        row.name = payload.name
    if payload.format is not None:
        row.format = payload.format
    if "kinds" in given:
        row.kinds = _checked_kinds(payload.kinds, tenant)
    if payload.disabled is not None:
        row.disabled = payload.disabled
    after = _audited(row)
    if after != before:
        changed = [name for name in after if after[name] != before[name]]
        _audit(db, principal, "webhook_endpoint.update", row,
               before={name: before[name] for name in changed},
               after={name: after[name] for name in changed})
    return _view(db, row, tenant)


def delete_endpoint(db: Session, principal: Principal, slug: str | None,
                    endpoint_id: int) -> None:
    tenant = owner(db, principal, slug, write=True)
    row = _endpoint(db, tenant, endpoint_id, lock=True)
    _audit(db, principal, "webhook_endpoint.delete", row, before=_audited(row))
    db.delete(row)
    db.flush()


def roll_secret(db: Session, principal: Principal, slug: str | None, endpoint_id: int,
                settings: Settings) -> SecretRolled:
    """A new secret; the current one still signs (beside it) for ``ROLL_OVERLAP``."""
    tenant = owner(db, principal, slug, write=True)
    row = _endpoint(db, tenant, endpoint_id, lock=True)
    secret = signing.new_secret()
    until = utcnow() + ROLL_OVERLAP
    row.previous_secret_sealed, row.previous_until = row.secret_sealed, until
    row.secret_sealed = SecretBox.from_settings(settings).seal(secret)
    _audit(db, principal, "webhook_endpoint.roll_secret", row,
           after={"previous_secret_until": until.isoformat()})
    return SecretRolled(id=row.id, secret=secret, previous_secret_until=until)


def send_test(db: Session, principal: Principal, slug: str | None,
              endpoint_id: int) -> TestSent:
    """A notification of kind ``test`` through the outbox, to this endpoint only."""
    tenant = owner(db, principal, slug, write=True)
    row = _endpoint(db, tenant, endpoint_id)
    if row.disabled:
        raise Conflict(f"webhook {row.name!r} is disabled: enable it to send a test")
    notice = emit.Notice(kinds.TEST, row.tenant_id, TARGET_TYPE, str(row.id),
                         {"endpoint": row.name, "tenant": _slug(tenant) or "",
                          "path": page_path(tenant)})
    notification_id = emit.notify(db, notice, [], [row.id])
    uid = db.scalar(select(Notification.uid).where(Notification.id == notification_id))
    _audit(db, principal, "webhook_endpoint.test", row, after={"notification_id": uid})
    return TestSent(notification_id=str(uid))


def page_path(tenant: Tenant | None) -> str:
    return f"/t/{tenant.slug}/webhooks" if tenant else "/admin/webhooks"


def kinds_for(tenant: Tenant | None) -> list[str]:
    """The kinds an endpoint of this owner can receive."""
    audience = "tenant" if tenant else "platform"
    return [name for name, kind in KINDS.items() if kind.audience == audience]


# ----- helpers


def _owned_by(tenant: Tenant | None) -> Any:
    return (WebhookEndpoint.tenant_id.is_(None) if tenant is None
            else WebhookEndpoint.tenant_id == tenant.id)


def _endpoint(db: Session, tenant: Tenant | None, endpoint_id: int, *,
              lock: bool = False) -> WebhookEndpoint:
    query = select(WebhookEndpoint).where(WebhookEndpoint.id == endpoint_id, _owned_by(tenant))
    row = db.scalar(query.with_for_update() if lock else query)
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return row


def _slug(tenant: Tenant | None) -> str | None:
    return tenant.slug if tenant else None


def _view(db: Session, row: WebhookEndpoint, tenant: Tenant | None) -> EndpointOut:
    return endpoint_views.described(db, [row], _slug(tenant))[0]


def _check_url(url: str, settings: Settings) -> None:
    problem = outbound.url_problem(url, http_hosts=settings.notify_http_hosts)
    if problem:
        raise ValidationFailed.on_field("url", f"the URL {problem}")
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    allowed = outbound.networks(settings.notify_webhook_allowed_networks.split(","))
    try:
        outbound.checked_addresses(parts.hostname or "", port, allowed=allowed, resolve=resolve)
    except outbound.Refused as refused:
        raise ValidationFailed.on_field("url", str(refused)) from None


def _checked_kinds(chosen: Sequence[str] | None, tenant: Tenant | None) -> list[str] | None:
    if chosen is None:
        return None
    possible = kinds_for(tenant)
    other = [kind for kind in chosen if kind not in possible]
    if other:
        whose = "a tenant's" if tenant else "the platform's"
        raise ValidationFailed.on_field(
            "kinds", f"{other[0]!r} is not sent to {whose} webhooks; they take "
                     f"{', '.join(possible)}")
    return list(chosen)


def _audited(row: WebhookEndpoint) -> dict[str, Any]:
    """What the audit trail keeps of an endpoint: never its secret, and of its URL the host
    alone (a URL's path can itself be a credential, a Slack webhook's is)."""
    parts = urlsplit(row.url)
    return {"name": row.name, "url_host": f"{parts.scheme}://{parts.netloc}",
            "format": row.format, "kinds": row.kinds, "disabled": row.disabled}


def _audit(db: Session, principal: Principal, action: str, row: WebhookEndpoint, *,
           before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> None:
    audit.record(db, action=action, actor_id=principal.user_id, actor_label=principal.label,
                 tenant_id=row.tenant_id, target_type=TARGET_TYPE, target_id=row.id,
                 target_label=f"webhook {row.name}", before=before, after=after)
