"""HTML: the platform admins' cluster template pages (create, new version, validate, offer,
retire, with the stored validation shown) and a cluster's template page with the upgrade button.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import ValidationError
from sqlalchemy.orm import Session
from starlette.responses import Response

from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.gpu_classes import service as gpu_classes
from app.http.deps import DbSession, get_settings_dep
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.kit.errors import NotFound
from app.templates import service
from app.templates.addon_lines import format_lines, parse_lines
from app.templates.schemas import TemplateCreate, VersionEdit
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
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
VersionNumber = Annotated[int, Path(ge=1, le=1_000_000)]
TemplateName = Annotated[str, Path(max_length=40)]
SETTING_KEYS = ("placement", "kubernetes_version", "gpu_class_id", "default_gpus", "max_gpus",
                "pod_security", "user_namespaces")
OPEN_WHEN_EMPTY = ("placement", "kubernetes_version", "gpu_class_id", "max_gpus", "pod_security")


def settings_payload(fields: dict[str, str]) -> dict[str, Any]:
    """Form fields as version settings: an empty choice leaves the setting open (null)."""
    payload = form_payload(fields, keys=SETTING_KEYS,
                           integers=("gpu_class_id", "default_gpus", "max_gpus"),
                           booleans=("user_namespaces",))
    for key in OPEN_WHEN_EMPTY:
        if payload.get(key) in ("", None):
            payload[key] = None
    payload["addons"] = addons_payload(fields.get("addons", ""))
    return payload


def addons_payload(text: str) -> list[dict[str, Any] | str]:
    """One add-on a line (app.templates.addon_lines); a malformed line is kept for the schema
    to refuse with a clear message."""
    return parse_lines(text)


def _form_context(db: DbSession, settings: Settings) -> dict[str, Any]:
    classes = gpu_classes.all_classes(db)
    return {"classes": classes, "class_names": {c.product: c.display_name for c in classes},
            "versions": settings.kubernetes_versions}


def _list_page(request: Request, db: DbSession, principal: Principal, settings: Settings,
               form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
               status_code: int = 200) -> Response:
    ensure_platform_admin(principal)
    return render(request, "cluster_templates/list.html", {
        "templates": service.list_templates(db, principal), "form": form or {},
        "errors": errors or {}, **_form_context(db, settings)}, status_code=status_code)


def _detail_page(request: Request, db: DbSession, principal: Principal, settings: Settings,
                 name: str, form: dict[str, Any] | None = None,
                 errors: FieldErrors | None = None, status_code: int = 200) -> Response:
    ensure_platform_admin(principal)
    template = service.get_template(db, principal, name)
    newest = template.versions[-1] if template.versions else None
    defaults = {k: "" if v is None else str(v)
                for k, v in (newest.model_dump() if newest else {}).items()}
    if newest is not None:
        defaults["addons"] = format_lines(a.model_dump() for a in newest.addons)
    return render(request, "cluster_templates/detail.html", {
        "template": template, "form": form or defaults, "errors": errors or {},
        **_form_context(db, settings)}, status_code=status_code)


@router.get("/admin/cluster-templates")
def templates_page(request: Request, db: DbSession, principal: CurrentPrincipal,
                   settings: AppSettings) -> Response:
    return _list_page(request, db, principal, settings)


@router.post("/admin/cluster-templates", dependencies=PLATFORM_STATE_CHANGING)
def create_template(request: Request, db: DbSession, principal: CurrentPrincipal,
                    settings: AppSettings, fields: FormFields) -> Response:
    payload = {"name": fields.get("name", ""), "description": fields.get("description", ""),
               "settings": settings_payload(fields)}

    def create() -> Response:
        created = service.create_template(db, principal, TemplateCreate.model_validate(payload))
        return go_to(request, f"/admin/cluster-templates/{created.name}")

    return submitted(create, lambda refusal: _list_page(
        request, db, principal, settings, fields, refusal.errors, refusal.status),
        schema_errors=_flat)


def _flat(error: ValidationError) -> FieldErrors:
    """Errors of nested settings under the form field's own name (``addons.0.repo`` is shown
    at the add-ons field as ``0.repo: ...``)."""
    errors: FieldErrors = {}
    for key, message in validation_errors(error).items():
        field, _, rest = key.removeprefix("settings.").partition(".")
        errors.setdefault(field, f"{rest}: {message}" if rest else message)
    return errors


@router.get("/admin/cluster-templates/{name}")
def template_page(request: Request, name: TemplateName, db: DbSession,
                  principal: CurrentPrincipal, settings: AppSettings) -> Response:
    return _detail_page(request, db, principal, settings, name)


@router.post("/admin/cluster-templates/{name}/versions", dependencies=PLATFORM_STATE_CHANGING)
def new_version(request: Request, name: TemplateName, db: DbSession,
                principal: CurrentPrincipal, settings: AppSettings,
                fields: FormFields) -> Response:
    def add_version() -> Response:
        service.new_version(db, principal, name,
                            VersionEdit.model_validate(settings_payload(fields)))
        return go_to(request, f"/admin/cluster-templates/{name}")

    return submitted(add_version, lambda refusal: _detail_page(
        request, db, principal, settings, name, fields, refusal.errors, refusal.status),
        schema_errors=_flat)


@router.post("/admin/cluster-templates/{name}/versions/{version}/validate",
             dependencies=PLATFORM_STATE_CHANGING)
def validate_version(request: Request, name: TemplateName, version: VersionNumber,
                     db: DbSession, principal: CurrentPrincipal, settings: AppSettings) -> Response:
    def validate() -> Response:
        service.request_validation(db, principal, name, version)
        return go_to(request, f"/admin/cluster-templates/{name}#v{version}")

    return submitted(validate, _action_refused(request, db, principal, settings, name))


@router.get("/admin/cluster-templates/{name}/versions/{version}/validation")
def validation_fragment(request: Request, name: TemplateName, version: VersionNumber,
                        db: DbSession, principal: CurrentPrincipal) -> Response:
    """The version's validation, which the page polls while the worker runs it."""
    ensure_platform_admin(principal)
    found = next((v for v in service.get_template(db, principal, name).versions
                  if v.version == version), None)
    if found is None:
        raise NotFound(f"cluster template {name!r} has no version {version}")
    return render(request, "cluster_templates/_validation.html",
                  {"template_name": name, "version": found})


@router.post("/admin/cluster-templates/{name}/versions/{version}/offer",
             dependencies=PLATFORM_STATE_CHANGING)
def offer_version(request: Request, name: TemplateName, version: VersionNumber, db: DbSession,
                  principal: CurrentPrincipal, settings: AppSettings) -> Response:
    return _change_state(request, db, principal, settings, name, version, service.offer_version)


@router.post("/admin/cluster-templates/{name}/versions/{version}/retire",
             dependencies=PLATFORM_STATE_CHANGING)
def retire_version(request: Request, name: TemplateName, version: VersionNumber, db: DbSession,
                   principal: CurrentPrincipal, settings: AppSettings) -> Response:
    return _change_state(request, db, principal, settings, name, version, service.retire_version)


def _change_state(request: Request, db: Session, principal: Principal, settings: Settings,
                  name: str, version: int,
                  change: Callable[[Session, Principal, str, int], object]) -> Response:
    """Offers or retires a version; a refusal shows the template's page with its reason."""

    def changed() -> Response:
        change(db, principal, name, version)
        return go_to(request, f"/admin/cluster-templates/{name}#v{version}")

    return submitted(changed, _action_refused(request, db, principal, settings, name))


def _action_refused(request: Request, db: Session, principal: Principal, settings: Settings,
                    name: str) -> Callable[[Refusal], Response]:
    """A version's action refused: its reason above the template's page, whose version form
    keeps the newest version's settings."""
    return lambda refusal: _detail_page(request, db, principal, settings, name, None,
                                        {"form": refusal.detail}, refusal.status)


# ----- a tenant's cluster


def _cluster_page(request: Request, db: DbSession, principal: Principal, tenant: str,
                  cluster: str, error: str = "", status_code: int = 200) -> Response:
    found, template, current, newer = service.cluster_template(db, principal, tenant, cluster)
    return render(request, "cluster_templates/cluster.html", {
        "tenant_slug": tenant, "cluster": found, "template": template, "current": current,
        "newer": newer, "error": error}, status_code=status_code)


@router.get("/t/{tenant}/clusters/{cluster}/template")
def cluster_template_page(request: Request, tenant: str, cluster: str, db: DbSession,
                          principal: CurrentPrincipal) -> Response:
    return _cluster_page(request, db, principal, tenant, cluster)


@router.post("/t/{tenant}/clusters/{cluster}/template-upgrade", dependencies=STATE_CHANGING)
def upgrade_cluster(request: Request, tenant: str, cluster: str, db: DbSession,
                    principal: CurrentPrincipal, settings: AppSettings,
                    fields: FormFields) -> Response:
    payload = form_payload(fields, keys=("version",), integers=("version",))
    version = payload.get("version")

    def upgrade() -> Response:
        service.upgrade_cluster(db, principal, settings, tenant, cluster,
                                version if isinstance(version, int) else None)
        return go_to(request, f"/t/{tenant}/clusters/{cluster}")

    return submitted(upgrade, lambda refusal: _cluster_page(
        request, db, principal, tenant, cluster, refusal.detail, refusal.status))
