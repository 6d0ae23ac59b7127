"""HTML: a tenant's clusters, the create form with inline checks, and the cluster page with
live conditions (a Server-Sent Events stream, polling without one) and their timeline,
resize, delete (the name typed to confirm) and the manifest review."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends, Request
from markupsafe import Markup
from starlette.responses import Response

from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz.scoping import TenantHidden
from app.clusters import service
from app.clusters.schemas import ClusterCreate, ClusterOut, ClusterResize, SleepPolicyIn
from app.clusters.shapes import TemplateChoice, TemplateResolver, template_resolver
from app.http.deps import DbSession, get_settings_dep
from app.http.pagination import PageParams
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.kit.errors import NotFound, ValidationFailed
from app.quotas import service as quotas
from app.quotas.room import parse_offer
from app.quotas.unit_form import in_unit, on_the_form
from app.quotas.units import unit_of
from app.tenants import service as tenants_service
from app.web import live
from app.web.charts.timeline import condition_timeline
from app.web.forms import (
    FieldErrors,
    FormFields,
    Refusal,
    check_typed_name,
    go_to,
    is_htmx,
    only_touched,
    said_once,
    submitted,
)
from app.web.forms import form_payload as parse_form
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
Resolver = Annotated[TemplateResolver | None, Depends(template_resolver)]
EVERYTHING = PageParams(limit=200)
CREATE_FIELDS = ("name", "kubernetes_version", "placement", "region", "gpu_class_id", "gpus",
                 "cpu_millicores", "memory_mib", "template", "template_version")
SIZE_FIELDS = ("gpus", "cpu_millicores", "memory_mib")
POLLING_PHASES = ("Provisioning", "Deleting", "Unreachable", "Sleeping", "Waking")
POLICY_FIELDS = ("never_sleep", "sleep_after_idle_minutes", "idle_measure", "sleep_schedule",
                 "sleep_timezone", "delete_after_sleep_days")


def _create_payload(fields: dict[str, str]) -> dict[str, Any]:
    offered = parse_offer(fields.get("gpu_class_id", "").strip())
    chosen = {**fields, "gpu_class_id": offered[0]} if offered is not None else fields
    payload = parse_form(chosen, keys=CREATE_FIELDS,
                         integers=("gpu_class_id", "gpus", "cpu_millicores", "memory_mib",
                                   "template_version"))
    for optional in ("kubernetes_version", "gpu_class_id", "placement", "region", "template",
                     "template_version"):
        if payload.get(optional) in ("", None):
            payload.pop(optional, None)
    return in_unit(payload, offered[1]) if offered is not None else payload


def _form_context(request: Request, db: DbSession, principal: Principal, settings: Settings,
                  tenant: str,
                  fields: dict[str, str], errors: FieldErrors,
                  resolver: TemplateResolver | None) -> dict[str, Any]:
    choices = resolver.choices(db) if resolver is not None else []
    return {"tenant_slug": tenant, "classes": quotas.room_per_class(db, principal, tenant),
            "regions": service.region_choices(db),
            "versions": settings.kubernetes_versions, "form": fields, "errors": errors,
            "template_choices": choices, "chosen": _chosen(choices, fields.get("template"))}


def _chosen(choices: list[TemplateChoice], name: str | None) -> TemplateChoice | None:
    """The template the form is filled in for: the one asked for, else the default (first)."""
    return next((c for c in choices if c.name == name), choices[0] if choices else None)


def _create_form(request: Request, db: DbSession, principal: Principal, settings: Settings,
                 tenant: str, fields: dict[str, str], errors: FieldErrors, status_code: int,
                 whole_page: bool = False, resolver: TemplateResolver | None = None) -> Response:
    context = _form_context(request, db, principal, settings, tenant, fields, errors, resolver)
    if not whole_page:
        return render(request, "clusters/_create_form.html", context, status_code=status_code)
    row, can_manage = tenants_service.tenant_and_rights(db, principal, tenant)
    context.update(tenant=row, can_manage=can_manage,
                   clusters=service.list_clusters(db, principal, tenant, EVERYTHING).items,
                   admins=[] if can_manage else tenants_service.admins_to_ask(db, principal,
                                                                              tenant))
    return render(request, "clusters/list.html", context, status_code=status_code)


def _check(db: DbSession, principal: Principal, settings: Settings, tenant: str,
           fields: dict[str, str], resolver: TemplateResolver | None) -> ClusterCreate:
    """The cluster if it can be created; a refusal if not."""
    payload = ClusterCreate.model_validate(_create_payload(fields))
    service.check_create(db, principal, settings, tenant, payload, resolver=resolver)
    return payload


@router.get("/t/{tenant}/clusters")
def clusters_page(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
                  settings: AppSettings, resolver: Resolver, template: str = "") -> Response:
    defaults = {"placement": "shared-pool", "cpu_millicores": "4000", "memory_mib": "16384",
                "template": template[:40]}
    return _create_form(request, db, principal, settings, tenant, defaults, {}, 200,
                        whole_page=True, resolver=resolver)


@router.post("/t/{tenant}/clusters/validate", dependencies=STATE_CHANGING)
def validate_cluster(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
                     settings: AppSettings, fields: FormFields, resolver: Resolver) -> Response:
    _may_create_in(db, principal, tenant)

    def checked() -> Response:
        _check(db, principal, settings, tenant, fields, resolver)
        return _create_form(request, db, principal, settings, tenant, fields, {}, 200,
                            resolver=resolver)

    def refused(refusal: Refusal) -> Response:
        errors = only_touched(request, fields, on_the_form(refusal.errors))
        return _create_form(request, db, principal, settings, tenant, fields, errors,
                            422 if errors else 200, resolver=resolver)

    return submitted(checked, refused)


@router.post("/t/{tenant}/clusters", dependencies=STATE_CHANGING)
def create_cluster(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
                   settings: AppSettings, fields: FormFields, resolver: Resolver) -> Response:
    _may_create_in(db, principal, tenant)

    def create() -> Response:
        payload = _check(db, principal, settings, tenant, fields, resolver)
        created = service.create_cluster(db, principal, settings, tenant, payload, resolver)
        return go_to(request, f"/t/{tenant}/clusters/{created.name}",
                     toast=f"Cluster {created.name} requested: the worker is provisioning it.")

    return submitted(create, lambda refusal: _create_form(
        request, db, principal, settings, tenant, fields, on_the_form(refusal.errors),
        refusal.status,
        whole_page=not is_htmx(request), resolver=resolver))


def _may_create_in(db: DbSession, principal: Principal, tenant: str) -> None:
    # A hidden tenant is a 404 and a viewer's a 403, whatever the form holds: the form that
    # answers a bad field echoes the slug from the URL.
    service.tenant_to_create_in(db, principal, tenant)


# ----- one cluster


def _detail(request: Request, db: DbSession, principal: Principal, settings: Settings,
            tenant: str, name: str, form: dict[str, Any] | None = None,
            errors: FieldErrors | None = None, status_code: int = 200,
            delete_error: str = "", policy: dict[str, Any] | None = None,
            policy_errors: FieldErrors | None = None, sleeps_now: str = "") -> Response:
    cluster = service.get_cluster(db, principal, tenant, name)
    row, can_manage = tenants_service.tenant_and_rights(db, principal, tenant)
    no_host = request.app.state.kube.host() is None
    return render(request, "clusters/detail.html", {
        "tenant": row, "can_manage": can_manage, "cluster": cluster,
        "polling": cluster.phase in POLLING_PHASES, "no_host": no_host,
        "timeline": _timeline(db, cluster), "delete_error": delete_error,
        "preview": service.preview(db, principal, settings, tenant, name),
        "form": form or _size_form(cluster),
        "errors": errors or {},
        "policy": policy or _policy_form(cluster), "policy_errors": policy_errors or {},
        "sleeps_now": sleeps_now, "idle_reading": _idle_reading(settings),
    }, status_code=status_code)


def _idle_reading(settings: Settings) -> dict[str, Any]:
    """What the page says of idleness read from GPU utilisation: the threshold, and why it is
    unknown when it is known to be (no Prometheus); the utilisation panel, loaded after the
    page, says whether Prometheus answers now."""
    unknown = None if settings.prometheus_url else "Prometheus is not configured"
    return {"threshold_percent": settings.idle_gpu_utilisation_percent, "unknown": unknown}


def _policy_form(cluster: ClusterOut) -> dict[str, Any]:
    shown = cluster.sleep_policy.model_dump(include=set(POLICY_FIELDS))
    return {k: "" if v is None else v for k, v in shown.items()}


@router.get("/t/{tenant}/clusters/{cluster}")
def cluster_page(request: Request, tenant: str, cluster: str, db: DbSession,
                 principal: CurrentPrincipal, settings: AppSettings) -> Response:
    return _detail(request, db, principal, settings, tenant, cluster)


@router.get("/t/{tenant}/clusters/{cluster}/status")
def cluster_status(request: Request, tenant: str, cluster: str, db: DbSession,
                   principal: CurrentPrincipal) -> Response:
    """The conditions partial the page polls; a deleted cluster sends the browser to the list."""
    try:
        found: ClusterOut = service.get_cluster(db, principal, tenant, cluster)
    except NotFound as error:
        # Only a cluster of a tenant the caller sees may send the browser to that tenant.
        if not is_htmx(request) or isinstance(error, TenantHidden):
            raise
        return go_to(request, f"/t/{tenant}/clusters")
    return render(request, "clusters/_status.html", {
        "tenant_slug": tenant, "cluster": found, "polling": found.phase in POLLING_PHASES,
        "timeline": _timeline(db, found)})


def _timeline(db: DbSession, cluster: ClusterOut) -> Markup | None:
    return condition_timeline("conditions-chart", cluster.name,
                              [c.model_dump() for c in cluster.conditions], datetime.now(UTC),
                              service.condition_history(db, cluster))


@router.get(live.PREFIX + "/t/{tenant}/clusters/{cluster}")
async def cluster_stream(request: Request, tenant: str, cluster: str,
                         principal: CurrentPrincipal) -> Response:
    """``changed`` whenever the cluster's conditions, generation or deletion move."""
    return await live.event_stream(
        request, lambda db: service.cluster_version(db, principal, tenant, cluster))


@router.post("/t/{tenant}/clusters/{cluster}/resize", dependencies=STATE_CHANGING)
def resize_cluster(request: Request, tenant: str, cluster: str, db: DbSession,
                   principal: CurrentPrincipal, settings: AppSettings,
                   fields: FormFields) -> Response:
    payload = parse_form(fields, keys=SIZE_FIELDS, integers=SIZE_FIELDS)
    shown = service.get_cluster(db, principal, tenant, cluster)
    if shown.unit != "gpu":  # a resize keeps the cluster's profile: its count is enough
        payload = in_unit(payload, unit_of(shown))
        payload.pop("mig_profile", None)

    def resize() -> Response:
        service.resize_cluster(db, principal, tenant, cluster,
                               ClusterResize.model_validate(payload))
        return go_to(request, f"/t/{tenant}/clusters/{cluster}",
                     toast=f"Cluster {cluster} resized: the worker applies the new size.")

    return submitted(resize, lambda refusal: _detail(
        request, db, principal, settings, tenant, cluster, fields,
        on_the_form(refusal.errors), refusal.status))


def _size_form(cluster: ClusterOut) -> dict[str, str]:
    """The resize form's values: the amount in the cluster's unit (slices, a share)."""
    form = {k: str(getattr(cluster, k)) for k in SIZE_FIELDS}
    if cluster.unit != "gpu":
        form["gpus"] = str(cluster.slices if cluster.unit == "mig" else cluster.gpu_share)
    return form


@router.post("/t/{tenant}/clusters/{cluster}/delete", dependencies=STATE_CHANGING)
def delete_cluster(request: Request, tenant: str, cluster: str, db: DbSession,
                   principal: CurrentPrincipal, settings: AppSettings,
                   fields: FormFields) -> Response:
    service.cluster_for(db, principal, tenant, cluster, "manage")  # who may, before what

    def delete() -> Response:
        check_typed_name(fields, cluster)
        service.delete_cluster(db, principal, tenant, cluster)
        return go_to(request, f"/t/{tenant}/clusters/{cluster}",
                     toast=f"Deleting cluster {cluster}: its kubeconfigs are revoked.")

    return submitted(delete, lambda refusal: _detail(
        request, db, principal, settings, tenant, cluster, status_code=refusal.status,
        delete_error=refusal.detail))


SLEEP_NOW = "sleep_now"


def _policy_payload(fields: dict[str, str]) -> dict[str, Any]:
    payload = parse_form(fields, keys=POLICY_FIELDS, booleans=("never_sleep",),
                         integers=("sleep_after_idle_minutes", "delete_after_sleep_days"))
    if not payload.get("idle_measure"):  # a form without the choice: the default, bound
        payload.pop("idle_measure", None)
    return payload


def _sleeps_at_once(db: DbSession, principal: Principal, tenant: str, cluster: str,
                    policy: SleepPolicyIn) -> str:
    """Said before saving a policy whose schedule puts the cluster to sleep at once: now, in
    the schedule's time zone ("" when it does not)."""
    now = datetime.now(UTC)
    if not service.sleep_policy_sleeps_at_once(db, principal, tenant, cluster, policy, now):
        return ""
    local = now.astimezone(ZoneInfo(policy.sleep_timezone))
    return f"{local:%A %H:%M} in {policy.sleep_timezone}"


@router.post("/t/{tenant}/clusters/{cluster}/sleep-policy/check", dependencies=STATE_CHANGING)
def check_sleep_policy(request: Request, tenant: str, cluster: str, db: DbSession,
                       principal: CurrentPrincipal, settings: AppSettings,
                       fields: FormFields) -> Response:
    """What saving the form would do, said before saving (the form asks on each change)."""
    service.cluster_for(db, principal, tenant, cluster, "manage")  # who may, before what

    def checked() -> Response:
        policy = SleepPolicyIn.model_validate(_policy_payload(fields))
        return _detail(request, db, principal, settings, tenant, cluster, policy=fields,
                       sleeps_now=_sleeps_at_once(db, principal, tenant, cluster, policy))

    def refused(refusal: Refusal) -> Response:
        errors = only_touched(request, fields, refusal.errors)
        return _detail(request, db, principal, settings, tenant, cluster, policy=fields,
                       policy_errors=errors, status_code=422 if errors else 200)

    return submitted(checked, refused)


@router.post("/t/{tenant}/clusters/{cluster}/sleep-policy", dependencies=STATE_CHANGING)
def set_sleep_policy(request: Request, tenant: str, cluster: str, db: DbSession,
                     principal: CurrentPrincipal, settings: AppSettings,
                     fields: FormFields) -> Response:
    """Saves the policy; one that puts the cluster to sleep at once is saved only once the
    form said so and the user ticked "Put it to sleep now"."""
    service.cluster_for(db, principal, tenant, cluster, "manage")  # who may, before what
    sleeps_now = ""

    def save() -> Response:
        nonlocal sleeps_now
        policy = SleepPolicyIn.model_validate(_policy_payload(fields))
        sleeps_now = _sleeps_at_once(db, principal, tenant, cluster, policy)
        if sleeps_now and fields.get(SLEEP_NOW) != "on":
            message = "saving this puts the cluster to sleep at once: tick to confirm"
            raise ValidationFailed(message, errors=[{"field": SLEEP_NOW, "message": message}])
        service.change_sleep_policy(db, principal, tenant, cluster, policy)
        return go_to(request, f"/t/{tenant}/clusters/{cluster}",
                     toast=f"Sleep policy of cluster {cluster} saved.",
                     focus="sleep-policy-summary")

    return submitted(save, lambda refusal: _detail(
        request, db, principal, settings, tenant, cluster, status_code=refusal.status,
        policy=fields, policy_errors=said_once(refusal.errors), sleeps_now=sleeps_now))


@router.post("/t/{tenant}/clusters/{cluster}/power", dependencies=STATE_CHANGING)
def change_power(request: Request, tenant: str, cluster: str, db: DbSession,
                 principal: CurrentPrincipal, fields: FormFields) -> Response:
    """Sleep now or wake now (tenant admins), as POST .../sleep and .../wake."""
    wanted = "asleep" if fields.get("power") == "asleep" else "awake"
    service.change_power(db, principal, tenant, cluster, wanted)
    said = "going to sleep" if wanted == "asleep" else "waking up"
    return go_to(request, f"/t/{tenant}/clusters/{cluster}",
                 toast=f"Cluster {cluster} is {said}.")
