"""HTML: the platform admins' bare-metal machine pages. BMC credentials are never filled back
in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError
from sqlalchemy.orm import Session
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.gpu_classes.service import all_classes
from app.hosts import repository as hosts_repository
from app.http.deps import DbSession
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import NotFound
from app.kube.simulated import spares_on_the_simulated_host
from app.machines import service
from app.machines.api import AppSettings, MachineName
from app.machines.schemas import BmcCredentialsIn, MachineRegister
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
REGISTER_KEYS = ("name", "host_cluster", "bmc_address", "boot_mac", "gpu_class", "gpu_count",
                 "rack")
ACTIONS = {"provision": service.provision, "release": service.release,
           "delete": service.delete_machine}


def _list_page(request: Request, db: Session, principal: Principal,
               form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
               status_code: int = 200) -> Response:
    ensure_platform_admin(principal)
    return render(request, "machines/list.html",
                  {"machines": service.list_machines(db, principal).items,
                   "hosts": [h.name for h in hosts_repository.all_hosts(db)],
                   "spares": spares_on_the_simulated_host(),
                   "class_names": _class_names(db),
                   "form": form or {}, "errors": errors or {}}, status_code=status_code)


def _detail_page(request: Request, db: Session, principal: Principal, name: str,
                 errors: FieldErrors | None = None, status_code: int = 200) -> Response:
    machine = service.get_machine(db, principal, name)
    return render(request, "machines/detail.html",
                  {"machine": machine, "errors": errors or {}, "class_names": _class_names(db)},
                  status_code=status_code)


def _class_names(db: Session) -> dict[str, str]:
    """Each class's display name by its product, as machines name their class."""
    return {c.product: c.display_name for c in all_classes(db)}


@router.get("/admin/machines")
def machines_page(request: Request, db: DbSession, principal: CurrentPrincipal) -> Response:
    return _list_page(request, db, principal)


@router.post("/admin/machines", dependencies=PLATFORM_STATE_CHANGING)
def register_machine(request: Request, db: DbSession, principal: CurrentPrincipal,
                     settings: AppSettings, fields: FormFields) -> Response:
    payload = form_payload(fields, keys=REGISTER_KEYS, integers=("gpu_count",))
    payload["bmc"] = {"username": fields.get("bmc_username", ""),
                      "password": fields.get("bmc_password", "")}
    shown = {k: v for k, v in payload.items() if k != "bmc"}

    def register() -> Response:
        row = service.register_machine(db, principal, settings,
                                       MachineRegister.model_validate(payload))
        return go_to(request, f"/admin/machines/{row.name}", f"Machine {row.name} registered")

    return submitted(register, lambda refusal: _list_page(
        request, db, principal, shown, refusal.errors, refusal.status))


@router.get("/admin/machines/{name}")
def machine_page(request: Request, name: MachineName, db: DbSession,
                 principal: CurrentPrincipal) -> Response:
    return _detail_page(request, db, principal, name)


@router.post("/admin/machines/{name}/bmc-credentials", dependencies=PLATFORM_STATE_CHANGING)
def replace_bmc_credentials(request: Request, name: MachineName, db: DbSession,
                            principal: CurrentPrincipal, settings: AppSettings,
                            fields: FormFields) -> Response:
    def replace() -> Response:
        payload = BmcCredentialsIn.model_validate(
            {"username": fields.get("bmc_username", ""),
             "password": fields.get("bmc_password", "")})
        service.replace_bmc_credentials(db, principal, settings, name, payload)
        return go_to(request, f"/admin/machines/{name}", "BMC credentials replaced")

    return submitted(replace, _on_detail_page(request, db, principal, name),
                     schema_errors=_as_bmc_fields)


def _as_bmc_fields(error: ValidationError) -> FieldErrors:
    return {f"bmc_{k}": v for k, v in validation_errors(error).items()}


@router.post("/admin/machines/{name}/{action}", dependencies=PLATFORM_STATE_CHANGING)
def act(request: Request, name: MachineName, action: str, db: DbSession,
        principal: CurrentPrincipal) -> Response:
    change = ACTIONS.get(action)
    if change is None:
        raise NotFound(f"no machine action {action!r}")

    def done() -> Response:
        change(db, principal, name)
        return go_to(request, f"/admin/machines/{name}", f"{name}: {action} asked")

    return submitted(done, _on_detail_page(request, db, principal, name))


def _on_detail_page(request: Request, db: Session, principal: Principal,
                    name: str) -> Callable[[Refusal], Response]:
    return lambda refusal: _detail_page(request, db, principal, name, refusal.errors,
                                        refusal.status)
