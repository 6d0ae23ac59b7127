"""HTML: the audit log, filterable by plain links or by its form (htmx swaps the results in
place), paged with htmx or plain links; sign-ins are left out unless asked for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from app.audit import readable
from app.audit.schemas import AuditFilters
from app.auth.deps import CurrentPrincipal
from app.database.core import utcnow
from app.http.deps import DbSession
from app.http.pagination import Paging
from app.http.routing import UnitOfWorkRoute
from app.kit.errors import ValidationFailed
from app.kit.validation import FilterMoment
from app.pages.audit_api import list_event_fields
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)

_MOMENT: TypeAdapter[datetime] = TypeAdapter(FilterMoment)
# The time ranges offered as links, newest first.
RECENT = (
    ("last hour", timedelta(hours=1)),
    ("last 24 hours", timedelta(days=1)),
    ("last 7 days", timedelta(days=7)),
)


def _moment(field: str, value: str | None) -> datetime | None:
    """A form's time (``datetime-local`` sends it without a zone: the page asks for UTC)."""
    if not value:
        return None
    try:
        return _MOMENT.validate_python(value)
    except ValidationError as error:
        raise ValidationFailed.on_field(field, "a date and time, e.g. 2026-12-01T08:00") from error


async def page_filters(
    tenant: Annotated[str | None, Query(max_length=30)] = None,
    actor: Annotated[str | None, Query(max_length=320)] = None,
    action: Annotated[str | None, Query(max_length=100)] = None,
    since: Annotated[str | None, Query(max_length=40)] = None,
    until: Annotated[str | None, Query(max_length=40)] = None,
    sign_ins: bool = False,
) -> AuditFilters:
    """The API's filters, where a form's empty field means "any"."""
    return AuditFilters(
        tenant=tenant or None,
        actor=actor or None,
        action=action or None,
        since=_moment("since", since),
        until=_moment("until", until),
        sign_ins=sign_ins,
    )


@router.get("/audit")
def audit_page(
    request: Request,
    principal: CurrentPrincipal,
    db: DbSession,
    filters: Annotated[AuditFilters, Depends(page_filters)],
    params: Paging,
) -> Response:
    events, cursor = list_event_fields(db, principal, filters, params, for_reading=True)
    flipped = filters.model_copy(update={"sign_ins": not filters.sign_ins})
    context = {
        "events": events,
        "filters": filters,
        "next_cursor": cursor,
        "more_query": _query(filters, cursor=cursor, limit=str(params.limit)) if cursor else "",
        "sign_ins_toggle": "/audit?" + _query(flipped),
        "kinds": _kinds(filters.action),
        "recent": _recent(filters),
    }
    return render(request, _template(request), context)


def _template(request: Request) -> str:
    """The whole page; for htmx, the next rows (older events) or the filtered results."""
    if not request.headers.get("hx-request"):
        return "audit/page.html"
    if request.headers.get("hx-target") == "audit-more":
        return "audit/rows.html"
    return "audit/_results.html"


def _query(filters: AuditFilters, **extra: str) -> str:
    """The filters as a query string, the way the page's own links and form send them."""
    values: dict[str, str] = {}
    for name in ("tenant", "actor", "action"):
        if getattr(filters, name):
            values[name] = getattr(filters, name)
    for name in ("since", "until"):
        moment = getattr(filters, name)
        if moment is not None:
            values[name] = form_moment(moment)
    if filters.sign_ins:
        values["sign_ins"] = "true"
    return urlencode({**values, **extra})


def form_moment(moment: datetime) -> str:
    """A moment as a ``datetime-local`` field sends it, in UTC (``strftime`` writes year 1 as
    "1", which would not read back)."""
    return moment.astimezone(UTC).isoformat(timespec="minutes")[:16]


def _kinds(action: str | None) -> list[tuple[str, str]]:
    """The kinds offered in the form, with an exact action from a link kept selectable."""
    kinds = list(readable.ACTION_KINDS)
    if action and action not in dict(kinds):
        kinds.insert(0, (action, action))
    return kinds


def _recent(filters: AuditFilters) -> list[tuple[str, str]]:
    now = utcnow()
    return [
        (label, "/audit?" + _query(filters.model_copy(update={"since": now - span, "until": None})))
        for label, span in RECENT
    ]
