"""HTML: the platform admins' host cluster pages. Secret fields are never filled back in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.hosts import service
from app.hosts.api import AppSettings, Charts, Connector, HostName
from app.hosts.schemas import HostCredentialsIn, HostRegister, HostUpdate, StateChange
from app.http.deps import DbSession
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import NotFound
from app.web.forms import (
    FieldErrors,
    FormFields,
    Refusal,
    form_payload,
    go_to,
    submitted,
    validation_errors,
)
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
SECRET_FIELDS = ("kubeconfig", "token", "ca_certificate")
CREDENTIAL_KEYS = ("kind", "kubeconfig", "server", "token", "ca_certificate")
STATES = {"cordon": "cordoned", "uncordon": "active", "drain": "draining"}


def _list_page(request: Request, db: DbSession, principal: Principal,
               form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
               status_code: int = 200) -> Response:
    ensure_platform_admin(principal)
    hosts = service.list_hosts(db, principal).items
    return render(request, "hosts/list.html",
                  {"hosts": hosts, "form": _without_secrets(form or {}),
                   "errors": errors or {}}, status_code=status_code)


def _detail_page(request: Request, db: DbSession, principal: Principal, name: str,
                 form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
                 status_code: int = 200) -> Response:
    host = service.get_host(db, principal, name)
    return render(request, "hosts/detail.html",
                  {"host": host, "form": _without_secrets(form or {}),
                   "errors": errors or {}}, status_code=status_code)


@router.get("/admin/hosts")
def hosts_page(request: Request, db: DbSession, principal: CurrentPrincipal) -> Response:
    return _list_page(request, db, principal)


@router.post("/admin/hosts", dependencies=PLATFORM_STATE_CHANGING)
def register_host(request: Request, db: DbSession, principal: CurrentPrincipal,
                  settings: AppSettings, fields: FormFields) -> Response:
    payload = form_payload(fields, keys=("name", "region", "description", "kube_qps",
                                         "kube_burst", "webhook_url"), integers=("kube_burst",))
    _optional_number(payload, "kube_qps")
    payload["credentials"] = _credentials(fields)

    def register() -> Response:
        row = service.register_host(db, principal, settings,
                                    HostRegister.model_validate(payload))
        return go_to(request, f"/admin/hosts/{row.name}", f"Host cluster {row.name} registered")

    return submitted(register, lambda refusal: _list_page(
        request, db, principal, payload, refusal.errors, refusal.status))


@router.get("/admin/hosts/{name}")
def host_page(request: Request, name: HostName, db: DbSession,
              principal: CurrentPrincipal) -> Response:
    return _detail_page(request, db, principal, name)


@router.post("/admin/hosts/{name}", dependencies=PLATFORM_STATE_CHANGING)
def update_host(request: Request, name: HostName, db: DbSession, principal: CurrentPrincipal,
                fields: FormFields) -> Response:
    payload = form_payload(fields, keys=("name", "region", "description", "kube_qps",
                                         "kube_burst", "webhook_url"), integers=("kube_burst",))
    for key in ("kube_qps", "kube_burst"):
        if fields.get(key, "").strip() == "":
            payload[key] = None  # an emptied field: back to the portal's default
    if "webhook_url" in fields and fields["webhook_url"].strip() == "":
        payload["webhook_url"] = None  # emptied: no webhook URL any more
    _optional_number(payload, "kube_qps")

    def update() -> Response:
        row = service.update_host(db, principal, name, HostUpdate.model_validate(payload))
        return go_to(request, f"/admin/hosts/{row.name}", "Saved")

    return submitted(update, _on_detail_page(request, db, principal, name, payload))


@router.post("/admin/hosts/{name}/credentials", dependencies=PLATFORM_STATE_CHANGING)
def replace_credentials(request: Request, name: HostName, db: DbSession,
                        principal: CurrentPrincipal, settings: AppSettings,
                        fields: FormFields) -> Response:
    payload = _credentials(fields)

    def replace() -> Response:
        service.replace_credentials(db, principal, settings, name,
                                    HostCredentialsIn.model_validate(payload))
        return go_to(request, f"/admin/hosts/{name}", "Credentials replaced")

    return submitted(replace, _on_detail_page(request, db, principal, name,
                                              {"credentials": payload}),
                     schema_errors=_as_credential_fields)


def _as_credential_fields(error: ValidationError) -> FieldErrors:
    return {f"credentials.{k}": v for k, v in validation_errors(error).items()}


@router.post("/admin/hosts/{name}/state/{action}", dependencies=PLATFORM_STATE_CHANGING)
def change_state(request: Request, name: HostName, action: str, db: DbSession,
                 principal: CurrentPrincipal, fields: FormFields) -> Response:
    if action not in STATES:
        raise NotFound(f"no host action {action!r}")

    def changed() -> Response:
        change = StateChange.model_validate({"reason": fields.get("reason", "")})
        service.set_state(db, principal, name, STATES[action], change.reason)
        return go_to(request, f"/admin/hosts/{name}", f"{name}: {action} done")

    return submitted(changed, _on_detail_page(request, db, principal, name))


@router.post("/admin/hosts/{name}/check", dependencies=PLATFORM_STATE_CHANGING)
def check_now(request: Request, name: HostName, db: DbSession, principal: CurrentPrincipal,
              settings: AppSettings, connector: Connector, charts: Charts) -> Response:
    service.check_host(db, principal, settings, connector, charts, name)
    return go_to(request, f"/admin/hosts/{name}", "Checked")


@router.post("/admin/hosts/{name}/delete", dependencies=PLATFORM_STATE_CHANGING)
def delete_host(request: Request, name: HostName, db: DbSession,
                principal: CurrentPrincipal) -> Response:
    def delete() -> Response:
        service.delete_host(db, principal, name)
        return go_to(request, "/admin/hosts", f"Host cluster {name} deleted")

    return submitted(delete, _on_detail_page(request, db, principal, name))


def _on_detail_page(request: Request, db: DbSession, principal: Principal, name: str,
                    form: dict[str, Any] | None = None) -> Callable[[Refusal], Response]:
    """A refusal shown on the host's page, with what was typed in ``form`` (never secrets)."""
    return lambda refusal: _detail_page(request, db, principal, name, form, refusal.errors,
                                        refusal.status)


def _credentials(fields: dict[str, str]) -> dict[str, Any]:
    payload = form_payload(fields, keys=CREDENTIAL_KEYS)
    return {key: value for key, value in payload.items() if value != "" or key == "kind"}


def _optional_number(payload: dict[str, Any], key: str) -> None:
    """An empty field takes the default; the schema parses (and names) the rest."""
    value = payload.get(key)
    if isinstance(value, str) and value.strip() == "":
        payload.pop(key)


def _without_secrets(form: dict[str, Any]) -> dict[str, Any]:
    """What a re-rendered form may show again: never the credentials typed in."""
    shown = {k: v for k, v in form.items() if k != "credentials"}
    credentials = form.get("credentials")
    if isinstance(credentials, dict):
        shown["credentials"] = {k: v for k, v in credentials.items()
                                if k not in SECRET_FIELDS}
    return shown


