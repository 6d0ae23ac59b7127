"""Moments at the calendar's edge, and without an offset, on every endpoint that takes one.

0001-01-01T00:00:00+01:00 is an hour before the first moment Python holds in UTC, and
9999-12-31T23:59:59-01:00 an hour past the last: converting either to UTC overflows. A filter
bound there is the calendar's edge (nothing lies beyond it), a report's range a 422 naming the
field, a stored moment a 422; never a 500. A query's moment without an offset is UTC; a body's
moment needs one.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import quote

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import AwareDatetime, BaseModel, NaiveDatetime, TypeAdapter, ValidationError
from sqlalchemy import literal, select
from sqlalchemy.orm import Session

from app.database.core import UTCDateTime
from app.kit.validation import EARLIEST, LATEST, FilterMoment, UtcMoment
from app.process.asgi import all_routers
from tests.support.tenancy import build_tenancy, headers, signed_in_admin_of
from tests.support.web import HTML, csrf_of

BEFORE_THE_FIRST_DAY = "0001-01-01T00:00:00+01:00"
PAST_THE_LAST_DAY = "9999-12-31T23:59:59-01:00"
FIRST_DAY_NO_OFFSET = "0001-01-01T00:00:00"
LAST_DAY_NO_OFFSET = "9999-12-31T23:59:59"
EDGES = (BEFORE_THE_FIRST_DAY, PAST_THE_LAST_DAY, FIRST_DAY_NO_OFFSET, LAST_DAY_NO_OFFSET)

# Every query parameter of the routers typed as a moment, as (path, name in the query).
QUERY_MOMENTS = {
    ("/api/v1/audit", "since"), ("/api/v1/audit", "until"),
    ("/api/v1/usage", "from"), ("/api/v1/usage", "to"),
    ("/api/v1/usage.csv", "from"), ("/api/v1/usage.csv", "to"),
    ("/api/v1/usage/clusters", "from"), ("/api/v1/usage/clusters", "to"),
    ("/api/v1/usage/clusters.csv", "from"), ("/api/v1/usage/clusters.csv", "to"),
    ("/t/{tenant}/usage", "from"), ("/t/{tenant}/usage", "to"),
    ("/admin/usage", "from"), ("/admin/usage", "to"),
}
# Moments the routers read as text (a form's ``datetime-local``), which no signature shows.
TEXT_QUERY_MOMENTS = {("/audit", "since"), ("/audit", "until")}
# Every JSON body field typed as a moment, as (method, path, field).
BODY_MOMENTS = {("POST", "/api/v1/tenants/{tenant}/quota-requests", "ends_at")}
# Forms read into the same schemas: the quota request form's end date.
FORM_MOMENTS = {("POST", "/t/{tenant}/quota-requests", "ends_at")}

_MOMENT_TYPES = (datetime, AwareDatetime, NaiveDatetime)


def _is_moment(annotation: object, seen: set[type] | None = None) -> bool:
    seen = set() if seen is None else seen
    if annotation in _MOMENT_TYPES:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return False
        seen.add(annotation)
        return any(_is_moment(f.annotation, seen) for f in annotation.model_fields.values())
    return any(_is_moment(argument, seen) for argument in typing.get_args(annotation))


def _parameters(dependant: Dependant) -> Iterator[tuple[str, object, str]]:
    for param in dependant.query_params:
        yield "query", param.field_info.annotation, param.alias
    for param in dependant.body_params:
        yield "body", param.field_info.annotation, param.alias
    for sub in dependant.dependencies:
        yield from _parameters(sub)


def _body_moment_fields(annotation: object) -> set[str]:
    assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
    return {name for name, f in annotation.model_fields.items() if _is_moment(f.annotation)}


def test_every_moment_a_router_takes_is_walked_here() -> None:
    """A new endpoint taking a moment fails here until it is added to the walk below."""
    queries: set[tuple[str, str]] = set()
    bodies: set[tuple[str, str, str]] = set()
    for route in (r for router in all_routers() for r in router.routes):
        if not isinstance(route, APIRoute):
            continue
        for where, annotation, name in _parameters(route.dependant):
            if not _is_moment(annotation):
                continue
            if where == "query":
                queries.add((route.path, name))
            else:
                bodies.update((method, route.path, field) for method in route.methods or ()
                              for field in _body_moment_fields(annotation))
    assert queries == QUERY_MOMENTS
    assert bodies == BODY_MOMENTS


def _filled(path: str) -> str:
    return path.replace("{tenant}", "acme")


@pytest.mark.parametrize("moment", EDGES)
def test_no_query_moment_at_the_calendars_edge_is_a_server_error(
    client: TestClient, db: Session, moment: str
) -> None:
    t = build_tenancy(db)
    for path, name in sorted(QUERY_MOMENTS | TEXT_QUERY_MOMENTS):
        caller = t.platform_admin if path.startswith("/admin") else t.acme_admin
        answer = client.get(f"{_filled(path)}?{name}={quote(moment)}",
                            headers={**headers(db, caller), **HTML})
        assert answer.status_code < 500, (path, name, answer.text[:300])
        if path.startswith("/api/v1/usage") or path.endswith("/usage"):
            # Reports are cut into days and months: the range must leave room for them.
            assert answer.status_code == 422, (path, name)
            assert "must lie between 1970-01-01 and 9999-01-01" in answer.text
        else:
            assert answer.status_code == 200, (path, name, answer.text[:300])


def test_the_audit_log_filtered_from_before_the_first_day_to_past_the_last_lists_everything(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    client.post("/api/v1/tenants/acme/members", headers=auth, json={"email": "x@example.com"})
    everything = client.get("/api/v1/audit", headers=auth).json()["items"]
    assert everything
    edges = client.get(f"/api/v1/audit?since={quote(BEFORE_THE_FIRST_DAY)}"
                       f"&until={quote(PAST_THE_LAST_DAY)}", headers=auth)
    assert edges.status_code == 200, edges.text
    assert edges.json()["items"] == everything


def test_a_query_moment_without_an_offset_is_utc(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    client.post("/api/v1/tenants/acme/members", headers=auth, json={"email": "x@example.com"})
    added = client.get("/api/v1/audit?action=membership.create", headers=auth).json()["items"]
    at = datetime.fromisoformat(added[0]["occurred_at"]).astimezone(UTC)
    just_after = (at + timedelta(seconds=1)).replace(tzinfo=None, microsecond=0).isoformat()
    for offset in ("", "Z"):
        after = client.get(f"/api/v1/audit?action=membership.create&since={just_after}{offset}",
                           headers=auth)
        before = client.get(f"/api/v1/audit?action=membership.create&until={just_after}{offset}",
                            headers=auth)
        assert (after.status_code, before.status_code) == (200, 200), (after.text, before.text)
        assert (after.json()["items"], before.json()["items"]) == ([], added)


@pytest.mark.parametrize("moment", EDGES)
def test_a_quota_request_ending_at_the_calendars_edge_is_refused_with_a_reason(
    client: TestClient, db: Session, moment: str
) -> None:
    t = build_tenancy(db)
    asked = client.post("/api/v1/tenants/acme/quota-requests", headers=headers(db, t.acme_admin),
                        json={"gpu_class_id": t.h100.id, "gpus": 1, "reason": "edge",
                              "ends_at": moment})
    assert asked.status_code == 422, asked.text
    [error] = asked.json()["errors"]
    assert error["field"] == "ends_at"


@pytest.mark.parametrize("moment", EDGES)
def test_the_quota_request_form_ending_at_the_calendars_edge_is_refused_on_the_form(
    client: TestClient, db: Session, oidc_issuer: str, moment: str
) -> None:
    t = build_tenancy(db)
    signed_in_admin_of(client, db, oidc_issuer, t.acme)
    csrf = csrf_of(client.get("/t/acme/quota-requests/new", headers=HTML).text)
    for method, path, field in sorted(FORM_MOMENTS):
        sent = client.request(method, _filled(path), headers={**HTML, "X-CSRF-Token": csrf},
                              data={"gpu_class_id": str(t.h100.id), "gpus": "1",
                                    "reason": "edge", field: moment})
        assert sent.status_code == 422, sent.text[:300]
        assert f'id="{field}-error"' in sent.text


@pytest.mark.parametrize("moment", [BEFORE_THE_FIRST_DAY, PAST_THE_LAST_DAY])
def test_a_moment_to_keep_off_the_calendar_is_refused_with_the_calendars_range(
    moment: str
) -> None:
    with pytest.raises(ValidationError, match="between 0001-01-01 and 9999-12-31 in UTC"):
        TypeAdapter(UtcMoment).validate_python(moment)


def test_a_filter_bound_off_the_calendar_is_its_edge_and_without_an_offset_utc() -> None:
    bound: TypeAdapter[datetime] = TypeAdapter(FilterMoment)
    assert bound.validate_python(BEFORE_THE_FIRST_DAY) == EARLIEST
    assert bound.validate_python(PAST_THE_LAST_DAY) == LATEST
    assert bound.validate_python("2026-12-01T08:00:00") == datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert bound.validate_python("2026-12-01T09:00:00+01:00").tzinfo == UTC


def test_a_moment_off_the_calendar_binds_as_its_edge(db: Session) -> None:
    """Whatever reaches a query with such a moment, the bind does not overflow."""
    east, west = timezone(timedelta(hours=1)), timezone(timedelta(hours=-1))
    column = literal(datetime(1, 1, 1, tzinfo=east), UTCDateTime())
    assert db.scalar(select(column)) == EARLIEST
    column = literal(datetime(9999, 12, 31, 23, 59, tzinfo=west), UTCDateTime())
    assert db.scalar(select(column)) == LATEST
