"""HTML: a tenant's webhooks (``/t/{tenant}/webhooks``, its admins) and the platform's
(``/admin/webhooks``). A new or rolled secret is shown on the page that made it, once.

Over htmx every action answers the page's ``#webhooks`` part; a plain form post is sent on to
the page, except creating and rolling, whose answer is the one showing of the secret.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.http.deps import DbSession, RowId, get_settings_dep
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.notifications import endpoints as service
from app.notifications.endpoint_schemas import EndpointCreate, EndpointUpdate
from app.notifications.kinds import KINDS
from app.web.forms import (
    FieldErrors,
    FormFields,
    Refusal,
    form_payload,
    go_to,
    is_htmx,
    submitted,
    with_toast,
)
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
KIND_FIELD = "kind."


def _path(slug: str | None) -> str:
    return f"/t/{slug}/webhooks" if slug else "/admin/webhooks"


def _page(request: Request, db: DbSession, principal: Principal, slug: str | None, *,
          form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
          shown_secret: dict[str, str] | None = None, status_code: int = 200,
          part: bool = False) -> Response:
    """The page (``part``: its ``#webhooks`` part, for htmx)."""
    tenant = service.owner(db, principal, slug, write=False)
    endpoints = service.list_endpoints(db, principal, slug)
    kinds = [KINDS[name] for name in service.kinds_for(tenant)]
    template = "notifications/pages/_webhooks.html" if part else "notifications/pages/webhooks.html"
    return render(request, template, {
        "tenant": tenant, "base": _path(slug), "endpoints": endpoints, "kinds": kinds,
        "form": form or {"format": "cloudevents"}, "errors": errors or {},
        "shown_secret": shown_secret,
    }, status_code=status_code)


def _create_payload(fields: dict[str, str]) -> dict[str, Any]:
    payload = form_payload(fields, keys=("name", "url", "format"))
    if not payload["format"]:
        del payload["format"]  # the default
    chosen = [key.removeprefix(KIND_FIELD) for key, value in fields.items()
              if key.startswith(KIND_FIELD) and value]
    payload["kinds"] = chosen or None
    return payload


def _create(request: Request, db: DbSession, principal: Principal, slug: str | None,
            fields: dict[str, str], settings: Settings) -> Response:
    payload = _create_payload(fields)

    def create() -> Response:
        made = service.create_endpoint(db, principal, slug,
                                       EndpointCreate.model_validate(payload), settings)
        answer = _page(request, db, principal, slug, part=is_htmx(request), status_code=201,
                       shown_secret={"name": made.name, "secret": made.secret})
        return with_toast(answer, f"Webhook {made.name} added.")

    return submitted(create, lambda refusal: _page(
        request, db, principal, slug, form=payload, errors=refusal.errors,
        status_code=refusal.status, part=is_htmx(request)))


def _acted(request: Request, db: DbSession, principal: Principal, slug: str | None,
           action: Callable[[], str]) -> Response:
    """Does ``action`` (its result's words), then shows the page, or its part over htmx."""
    def act() -> Response:
        said = action()
        if not is_htmx(request):
            return go_to(request, _path(slug), toast=said)
        return with_toast(_page(request, db, principal, slug, part=True), said)

    def refused(refusal: Refusal) -> Response:
        if not is_htmx(request):
            raise refusal.problem
        return with_toast(_page(request, db, principal, slug, errors=refusal.errors,
                                status_code=refusal.status, part=True), refusal.detail)

    return submitted(act, refused)


def _test(db: DbSession, principal: Principal, slug: str | None, endpoint_id: int
          ) -> Callable[[], str]:
    def send() -> str:
        sent = service.send_test(db, principal, slug, endpoint_id)
        return f"Test sent (webhook-id {sent.notification_id}): see its deliveries below."
    return send


def _switch(db: DbSession, principal: Principal, slug: str | None, endpoint_id: int,
            fields: dict[str, str], settings: Settings) -> Callable[[], str]:
    def switch() -> str:
        payload = EndpointUpdate.model_validate(form_payload(fields, keys=("disabled",),
                                                             booleans=("disabled",)))
        row = service.update_endpoint(db, principal, slug, endpoint_id, payload, settings)
        return f"Webhook {row.name} {'disabled' if row.disabled else 'enabled'}."
    return switch


def _delete(db: DbSession, principal: Principal, slug: str | None, endpoint_id: int
            ) -> Callable[[], str]:
    def delete() -> str:
        service.delete_endpoint(db, principal, slug, endpoint_id)
        return "Webhook deleted."
    return delete


def _roll(request: Request, db: DbSession, principal: Principal, slug: str | None,
          endpoint_id: int, settings: Settings) -> Response:
    def roll() -> Response:
        rolled = service.roll_secret(db, principal, slug, endpoint_id, settings)
        name = service.get_endpoint(db, principal, slug, endpoint_id).name
        answer = _page(request, db, principal, slug, part=is_htmx(request),
                       shown_secret={"name": name, "secret": rolled.secret})
        return with_toast(answer, f"Secret of {name} rolled.")

    def refused(refusal: Refusal) -> Response:
        if not is_htmx(request):
            raise refusal.problem
        return with_toast(_page(request, db, principal, slug, status_code=refusal.status,
                                part=True), refusal.detail)

    return submitted(roll, refused)


# ----- a tenant's


@router.get("/t/{tenant}/webhooks")
def tenant_webhooks(request: Request, tenant: str, db: DbSession,
                    principal: CurrentPrincipal) -> Response:
    return _page(request, db, principal, tenant)


@router.post("/t/{tenant}/webhooks", dependencies=STATE_CHANGING)
def create_tenant_webhook(request: Request, tenant: str, db: DbSession,
                          principal: CurrentPrincipal, fields: FormFields,
                          settings: AppSettings) -> Response:
    return _create(request, db, principal, tenant, fields, settings)


@router.post("/t/{tenant}/webhooks/{endpoint_id}", dependencies=STATE_CHANGING)
def switch_tenant_webhook(request: Request, tenant: str, endpoint_id: RowId, db: DbSession,
                          principal: CurrentPrincipal, fields: FormFields,
                          settings: AppSettings) -> Response:
    return _acted(request, db, principal, tenant,
                  _switch(db, principal, tenant, endpoint_id, fields, settings))


@router.post("/t/{tenant}/webhooks/{endpoint_id}/test", dependencies=STATE_CHANGING)
def test_tenant_webhook(request: Request, tenant: str, endpoint_id: RowId, db: DbSession,
                        principal: CurrentPrincipal) -> Response:
    return _acted(request, db, principal, tenant, _test(db, principal, tenant, endpoint_id))


@router.post("/t/{tenant}/webhooks/{endpoint_id}/roll-secret", dependencies=STATE_CHANGING)
def roll_tenant_webhook(request: Request, tenant: str, endpoint_id: RowId, db: DbSession,
                        principal: CurrentPrincipal, settings: AppSettings) -> Response:
    return _roll(request, db, principal, tenant, endpoint_id, settings)


@router.post("/t/{tenant}/webhooks/{endpoint_id}/delete", dependencies=STATE_CHANGING)
def delete_tenant_webhook(request: Request, tenant: str, endpoint_id: RowId, db: DbSession,
                          principal: CurrentPrincipal) -> Response:
    return _acted(request, db, principal, tenant, _delete(db, principal, tenant, endpoint_id))


# ----- the platform's


@router.get("/admin/webhooks")
def admin_webhooks(request: Request, db: DbSession, principal: CurrentPrincipal) -> Response:
    return _page(request, db, principal, None)


@router.post("/admin/webhooks", dependencies=PLATFORM_STATE_CHANGING)
def create_admin_webhook(request: Request, db: DbSession, principal: CurrentPrincipal,
                         fields: FormFields, settings: AppSettings) -> Response:
    return _create(request, db, principal, None, fields, settings)


@router.post("/admin/webhooks/{endpoint_id}", dependencies=PLATFORM_STATE_CHANGING)
def switch_admin_webhook(request: Request, endpoint_id: RowId, db: DbSession,
                         principal: CurrentPrincipal, fields: FormFields,
                         settings: AppSettings) -> Response:
    return _acted(request, db, principal, None,
                  _switch(db, principal, None, endpoint_id, fields, settings))


@router.post("/admin/webhooks/{endpoint_id}/test", dependencies=PLATFORM_STATE_CHANGING)
def test_admin_webhook(request: Request, endpoint_id: RowId, db: DbSession,
                       principal: CurrentPrincipal) -> Response:
    return _acted(request, db, principal, None, _test(db, principal, None, endpoint_id))


@router.post("/admin/webhooks/{endpoint_id}/roll-secret", dependencies=PLATFORM_STATE_CHANGING)
def roll_admin_webhook(request: Request, endpoint_id: RowId, db: DbSession,
                       principal: CurrentPrincipal, settings: AppSettings) -> Response:
    return _roll(request, db, principal, None, endpoint_id, settings)


@router.post("/admin/webhooks/{endpoint_id}/delete", dependencies=PLATFORM_STATE_CHANGING)
def delete_admin_webhook(request: Request, endpoint_id: RowId, db: DbSession,
                         principal: CurrentPrincipal) -> Response:
    return _acted(request, db, principal, None, _delete(db, principal, None, endpoint_id))
