"""HTML: the fleet view, node detail with assignment, node suggestions, a tenant's nodes."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.authz import ensure_platform_writer
from app.authz.routes import PLATFORM_STATE_CHANGING
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.charts import capacity_chart
from app.http.deps import DbSession
from app.http.pagination import PageParams, Paging
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import NotFound
from app.nodes import service
from app.nodes.api import Filters, SortQuery
from app.nodes.repository import NodeFilters
from app.nodes.schemas import AssignmentIn, SuggestionIn
from app.web import live
from app.web.forms import (
    FieldErrors,
    FormFields,
    Refusal,
    check_typed_name,
    form_payload,
    go_to,
    is_htmx,
    problem_errors,
    submitted,
)
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
SUGGESTION_FIELDS = ("tenant", "gpu_class", "gpus")


def _host_connected(request: Request) -> bool:
    return request.app.state.kube.host() is not None


@router.get("/admin/fleet")
def fleet(request: Request, db: DbSession, principal: CurrentPrincipal, filters: Filters,
          paging: Paging, sort: SortQuery = "name") -> Response:
    """Capacity per class (summed by the database) and one page of the node table, filtered
    and sorted by the database; the table's filters, orders and page links swap the table
    alone, and the live stream refreshes the capacity or the table (``HX-Target``)."""
    if is_htmx(request) and request.headers.get("hx-target") == "fleet-capacity-section":
        return render(request, "nodes/_capacity.html", _capacity(db, principal))
    page = service.list_nodes(db, principal, filters, paging, sort=sort)
    context: dict[str, Any] = {"nodes": page.items, "next_cursor": page.next_cursor,
                               "filters": filters, "sort": sort, "sorts": NODE_SORT_LABELS,
                               "table_query": _table_query(filters, sort),
                               "sort_query": _sort_query(filters),
                               "filtered": filters != NodeFilters(),
                               "current_cursor": paging.cursor or "",
                               "first_page": paging.cursor is not None}
    if is_htmx(request):
        return render(request, "nodes/_node_table.html", context)
    context.update(_capacity(db, principal), zones=service.fleet_zones(db, principal),
                   connected=_host_connected(request))
    return render(request, "nodes/fleet.html", context)


NODE_SORT_LABELS = {"name": "name", "rack": "rack, then name", "id": "first seen"}


def _capacity(db: DbSession, principal: Principal) -> dict[str, Any]:
    classes = gpu_classes.list_classes(db, principal, PageParams(limit=200)).items
    chart = capacity_chart("capacity-chart", "GPUs per GPU class: dedicated, guaranteed, free",
                           [(c.display_name, c.capacity) for c in classes if c.capacity])
    return {"classes": classes, "capacity_chart": chart}


def _filter_values(filters: NodeFilters) -> dict[str, str | None]:
    ready = None if filters.ready is None else str(filters.ready).lower()
    return {"gpu_class": filters.gpu_class, "zone": filters.zone, "rack": filters.rack,
            "tenant": filters.tenant, "ready": ready}


def _table_query(filters: NodeFilters, sort: str) -> str:
    """The table's filters and order as a query string, for its page links."""
    values = {**_filter_values(filters), "sort": sort}
    return urlencode({key: value for key, value in values.items() if value})


def _sort_query(filters: NodeFilters) -> str:
    """The filters as a query string ready for a ``sort=`` to follow: the column links."""
    query = urlencode({key: value for key, value in _filter_values(filters).items() if value})
    return f"{query}&" if query else ""


def _node_page(request: Request, db: DbSession, principal: Principal, node: str,
               errors: FieldErrors | None = None, status_code: int = 200) -> Response:
    return render(request, "nodes/node.html", {
        "node": service.get_node(db, principal, node), "errors": errors or {},
    }, status_code=status_code)


@router.get("/admin/nodes/{node}")
def node_detail(request: Request, node: str, db: DbSession,
                principal: CurrentPrincipal) -> Response:
    return _node_page(request, db, principal, node)


@router.get(live.PREFIX + "/admin/fleet")
async def fleet_stream(request: Request, principal: CurrentPrincipal) -> Response:
    """``changed`` whenever a node is dedicated or given back, turns (not) ready or goes."""
    return await live.event_stream(request,
                                   lambda db: service.assignment_version(db, principal))


@router.get(live.PREFIX + "/admin/nodes/{node}")
async def node_stream(request: Request, node: str, principal: CurrentPrincipal) -> Response:
    return await live.event_stream(
        request, lambda db: service.assignment_version(db, principal, node))


@router.post("/admin/nodes/{node}/assignment", dependencies=PLATFORM_STATE_CHANGING)
def assign(request: Request, node: str, db: DbSession, principal: CurrentPrincipal,
           fields: FormFields) -> Response:
    def assign_tenant() -> Response:
        payload = AssignmentIn.model_validate(form_payload(fields, keys=("tenant",)))
        service.assign_node(db, principal, node, payload)
        return go_to(request, f"/admin/nodes/{node}",
                     toast=f"{node} is dedicated to {payload.tenant}.")

    return submitted(assign_tenant, lambda refusal: _node_page(
        request, db, principal, node, problem_errors(refusal.problem), refusal.status))


@router.post("/admin/nodes/{node}/assignment/end", dependencies=PLATFORM_STATE_CHANGING)
def end_assignment(request: Request, node: str, db: DbSession,
                   principal: CurrentPrincipal, fields: FormFields) -> Response:
    ensure_platform_writer(principal)  # who may, before what was typed

    def end() -> Response:
        check_typed_name(fields, node)
        service.end_assignment(db, principal, node)
        return go_to(request, f"/admin/nodes/{node}",
                     toast=f"{node} is back in the shared pool.")

    def refused(refusal: Refusal) -> Response:
        service.get_node(db, principal, node)  # an unknown node stays a plain 404
        return _node_page(request, db, principal, node, {"confirm_name": refusal.detail},
                          refusal.status)

    try:
        return submitted(end, refused)
    except NotFound as error:  # no assignment to end
        service.get_node(db, principal, node)
        return _node_page(request, db, principal, node, {"form": error.detail}, 409)


def _suggest_page(request: Request, db: DbSession, principal: Principal,
                  form: dict[str, Any], errors: FieldErrors | None = None,
                  status_code: int = 200, suggestion: Any = None, partial: bool = False,
                  free: Any = ()) -> Response:
    template = "nodes/_suggestion.html" if partial else "nodes/suggest.html"
    return render(request, template, {
        "classes": service.classes_to_suggest(db, principal), "form": form,
        "tenants": [] if partial else service.tenants_to_pick(db, principal),
        "tenant_choices": service.TENANT_CHOICES,
        "errors": _once(errors or {}),
        "suggestion": suggestion, "free": free,
    }, status_code=status_code)


def _once(errors: FieldErrors) -> FieldErrors:
    """Each message once: the form's own is left out when a field says the same."""
    fields = {name: message for name, message in errors.items() if name != "form"}
    return fields if errors.get("form") in fields.values() else errors


@router.get("/admin/fleet/suggest")
def suggest_form(request: Request, db: DbSession, principal: CurrentPrincipal) -> Response:
    return _suggest_page(request, db, principal, {})


@router.post("/admin/fleet/suggest", dependencies=PLATFORM_STATE_CHANGING)
def suggest(request: Request, db: DbSession, principal: CurrentPrincipal,
            fields: FormFields) -> Response:
    form = form_payload(fields, keys=SUGGESTION_FIELDS, integers=("gpus",))
    partial = is_htmx(request)

    def suggested() -> Response:
        suggestion = service.suggest_nodes(db, principal, SuggestionIn.model_validate(form))
        names = {node.name for node in suggestion.nodes}
        free = [n for n in service.free_nodes_of(db, principal, suggestion.gpu_class)
                if n.name not in names]
        return _suggest_page(request, db, principal, fields, suggestion=suggestion,
                             partial=partial, free=free)

    return submitted(suggested, lambda refusal: _suggest_page(
        request, db, principal, fields, problem_errors(refusal.problem), refusal.status,
        partial=partial))


async def chosen_nodes(request: Request) -> list[str]:
    form = await request.form()
    return [value for value in form.getlist("node") if isinstance(value, str)]


@router.post("/admin/fleet/assignments", dependencies=PLATFORM_STATE_CHANGING)
def accept_suggestion(request: Request, db: DbSession, principal: CurrentPrincipal,
                      fields: FormFields,
                      nodes: Annotated[list[str], Depends(chosen_nodes)]) -> Response:
    tenant = fields.get("tenant", "")

    def accept() -> Response:
        service.assign_nodes(db, principal, tenant, nodes)
        return go_to(request, f"/admin/fleet?tenant={quote(tenant)}",
                     toast=f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} dedicated to "
                           f"{tenant}.")

    return submitted(accept, lambda refusal: _suggest_page(
        request, db, principal, fields, refusal.errors, refusal.status,
        partial=is_htmx(request)))


@router.get("/t/{tenant}/nodes")
def tenant_nodes(request: Request, tenant: str, db: DbSession, principal: CurrentPrincipal,
                 paging: Paging) -> Response:
    page = service.tenant_nodes(db, principal, tenant, paging)
    return render(request, "nodes/tenant_nodes.html", {
        "tenant_slug": tenant, "nodes": page.items, "next_cursor": page.next_cursor})
