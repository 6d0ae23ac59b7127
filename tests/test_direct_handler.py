"""Routes solved from their plan (``app.http.direct``) answer exactly as FastAPI's handler does:
the same values, the same 422 errors in the same order, the same status codes and bodies, and
dependencies with ``yield`` that see the endpoint's error."""

# No ``from __future__ import annotations``: the routes' dependencies are local names.
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Path, Query, Request
from fastapi.params import Form
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from app.http.direct import direct_handler
from app.http.routing import UnitOfWorkRoute
from app.process.asgi import all_routers, create_app


class Planned(APIRoute):
    def get_route_handler(self) -> Any:
        handler = direct_handler(self)
        assert handler is not None, f"no plan for {self.path}"
        return handler


class Item(BaseModel):
    name: str = Field(min_length=1, max_length=20)
    gpus: int = Field(ge=0, le=8)


class ItemOut(Item):
    id: int
    by: str


def make_router(route_class: type[APIRoute], events: list[str]) -> APIRouter:
    bearer = HTTPBearer(auto_error=False)
    counted: list[int] = []

    async def caller(token: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
                     ) -> str:
        counted.append(1)
        if token is None:
            raise HTTPException(401, "no token")
        return token.credentials

    async def unit_of_work(request: Request) -> AsyncIterator[str]:
        events.append("open")
        try:
            yield request.url.path
        except HTTPException as error:
            events.append(f"rolled back {error.status_code}")
            raise
        events.append("committed")

    async def paging(limit: Annotated[int, Query(ge=1, le=100)] = 10,
                     cursor: str | None = None) -> tuple[int, str | None]:
        return limit, cursor

    async def guard(who: Annotated[str, Depends(caller)]) -> None:
        if who == "blocked":
            raise HTTPException(403, "blocked")

    router = APIRouter(route_class=route_class, dependencies=[Depends(guard)])

    @router.get("/items/{item_id}")
    async def get_item(item_id: Annotated[int, Path(ge=1, le=1000)],
                       who: Annotated[str, Depends(caller)],
                       work: Annotated[str, Depends(unit_of_work, scope="function")],
                       page: Annotated[tuple[int, str | None], Depends(paging)],
                       x_trace: Annotated[str | None, Header()] = None) -> dict[str, Any]:
        if item_id == 13:
            raise HTTPException(409, "unlucky")
        return {"id": item_id, "who": who, "work": work, "page": list(page),
                "trace": x_trace, "caller_solved": len(counted)}

    @router.post("/items", status_code=201, response_model=ItemOut)
    async def create_item(item: Item, who: Annotated[str, Depends(caller)]) -> dict[str, Any]:
        return {**item.model_dump(), "id": 7, "by": who, "dropped": "not in the model"}

    @router.get("/search")
    async def search(q: Annotated[str, Query(min_length=1)],
                     ids: Annotated[list[int], Query(alias="id")] = [],  # noqa: B006
                     tag: Annotated[list[str] | None, Query()] = None) -> dict[str, Any]:
        return {"q": q, "ids": ids, "tag": tag}

    @router.delete("/items/{item_id}", status_code=204)
    async def delete_item(item_id: int, who: Annotated[str, Depends(caller)]) -> None:
        events.append(f"deleted {item_id} by {who}")

    return router


def make_client(route_class: type[APIRoute], events: list[str]) -> TestClient:
    app = FastAPI()
    app.include_router(make_router(route_class, events), prefix="/v1")
    return TestClient(app, raise_server_exceptions=False)


AUTH = {"Authorization": "Bearer alice"}
REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v1/items/5?limit=20&cursor=abc", {"headers": {**AUTH, "X-Trace": "t1"}}),
    ("GET", "/v1/items/5", {"headers": AUTH}),
    ("GET", "/v1/items/0?limit=500", {"headers": AUTH}),
    ("GET", "/v1/items/abc?limit=x", {"headers": AUTH}),
    ("GET", "/v1/items/5?limit=500", {}),
    ("GET", "/v1/items/13", {"headers": AUTH}),
    ("GET", "/v1/items/5", {"headers": {"Authorization": "Bearer blocked"}}),
    ("POST", "/v1/items", {"headers": AUTH, "json": {"name": "a", "gpus": 2}}),
    ("POST", "/v1/items", {"headers": AUTH, "json": {"name": "", "gpus": 9}}),
    ("POST", "/v1/items", {"headers": AUTH}),
    ("POST", "/v1/items", {"headers": {**AUTH, "Content-Type": "application/json"},
                           "content": b'{"name": "a",'}),
    ("POST", "/v1/items", {"headers": {**AUTH, "Content-Type": "text/plain"},
                           "content": b'{"name": "a", "gpus": 1}'}),
    ("POST", "/v1/items", {"headers": {**AUTH, "Content-Type": "application/merge-patch+json"},
                           "content": b'{"name": "b", "gpus": 1}'}),
    ("POST", "/v1/items", {"json": {"name": "a", "gpus": 2}}),
    ("POST", "/v1/items", {"content": b"[", "headers": {"Content-Type": "application/json"}}),
    ("DELETE", "/v1/items/4", {"headers": AUTH}),
    ("GET", "/v1/search?q=gpu&id=1&id=2&tag=a&tag=b", {"headers": AUTH}),
    ("GET", "/v1/search?q=gpu", {"headers": AUTH}),
    ("GET", "/v1/search?tag=", {"headers": AUTH}),
    ("GET", "/v1/search?id=1&id=x&q=", {"headers": AUTH}),
]


@pytest.mark.parametrize(("method", "url", "options"), REQUESTS,
                         ids=[f"{m} {u} {sorted(o)}" for m, u, o in REQUESTS])
def test_a_planned_route_answers_as_fastapi_does(method: str, url: str,
                                                 options: dict[str, Any]) -> None:
    planned_events: list[str] = []
    fastapi_events: list[str] = []
    planned = make_client(Planned, planned_events).request(method, url, **options)
    expected = make_client(APIRoute, fastapi_events).request(method, url, **options)
    assert (planned.status_code, planned.content) == (expected.status_code, expected.content)
    assert planned.headers.get("content-type") == expected.headers.get("content-type")
    assert planned_events == fastapi_events


def test_the_cases_above_reach_every_outcome() -> None:
    """The comparison means something: answers, refusals, errors and dependency exits."""
    events: list[str] = []
    client = make_client(Planned, events)
    outcomes = {client.request(m, u, **o).status_code for m, u, o in REQUESTS}
    assert outcomes == {200, 201, 204, 401, 403, 409, 422}
    assert "rolled back 409" in events and "committed" in events
    answer = make_client(Planned, []).get("/v1/items/5?limit=20", headers=AUTH).json()
    assert answer["page"] == [20, None] and answer["caller_solved"] == 1  # solved once


def test_every_portal_route_but_forms_is_planned() -> None:
    """Where the portal's time per request goes: a route losing its plan (a sync dependency,
    which FastAPI runs in a thread) falls back to FastAPI's slower solver without any other
    sign. Forms stay with FastAPI (their parsing and limits)."""
    create_app()
    routes = [route for router in all_routers() for route in router.routes
              if isinstance(route, UnitOfWorkRoute)]
    unplanned = [f"{route.methods} {route.path}" for route in routes
                 if direct_handler(route) is None and not _takes_a_form(route)]
    assert len(routes) > 100
    assert unplanned == []


def _takes_a_form(route: APIRoute) -> bool:
    return route.body_field is not None and isinstance(route.body_field.field_info, Form)
