"""Hostile input never ends in a server error, and every answer carries the security headers.

A property-based sweep (issue 30): every operation of the OpenAPI document, every page's form
post and every page GET that takes parameters starts from a request the matrix knows to be
valid (``tests/authz/route_access.py``) and has one to three of its inputs (path and query
parameters, the ``Idempotency-Key`` header, body fields, or the whole body) replaced with
hostile values: control, format and unpaired surrogate characters, text at and past each
field's ``maxLength`` and far past it, 320+ character emails, JSON nested 1,000 and 100,000
deep, dates at the calendar's edges, numbers at and past every integer bound, NaN and Infinity,
and values of the wrong type. Each runs as a platform admin, a tenant admin and an
unauthenticated caller, on PostgreSQL and on SQLite, so the values reach services, queries and
column widths.

Every answer must be below 500 and carry the security headers. The seeds are fixed per
operation and caller, so a failure reproduces; all failures are listed together at the end.
"""

from __future__ import annotations

import contextlib
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from app.auth.sessions import PLAIN_COOKIE
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import all_routers, create_app
from tests.authz.route_access import ROUTES, Route
from tests.authz.world import World, build_world
from tests.support.kube import InMemoryConnector

SECURITY_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options",
                    "referrer-policy")
CALLERS = ("platform_admin", "acme_admin", "anonymous")
# Per operation and caller. Fewer on SQLite, whose columns take text of any width: the cases
# that differ there are few, and the sweep stays within about three minutes.
EXAMPLES = {"postgresql": 10, "sqlite": 5}
URL_TEXT_LIMIT = 600
# Revoking the caller's own token or session would sign the caller out for every later case;
# neither takes any input to fuzz.
NO_INPUT_THAT_SIGNS_OUT = {("DELETE", "/api/v1/tokens/current"), ("POST", "/auth/logout")}


@dataclass(frozen=True)
class Raw:
    """JSON text spliced into a body as is: nesting too deep to build, NaN, 1e400."""

    text: str

    def __repr__(self) -> str:
        return f"Raw({_abridged(self.text)})"


def _nested(depth: int, inner: str, pair: tuple[str, str] = ("[", "]")) -> Raw:
    return Raw(pair[0] * depth + inner + pair[1] * depth)


NUL_JSON = '"\\u0000"'
DEEP = tuple(
    nested for depth in (1_000, 100_000) for nested in (
        _nested(depth, NUL_JSON), _nested(depth, "1"),
        _nested(depth, NUL_JSON, ('{"a":', "}")), _nested(depth, "null", ('{"a":', "}")))
)
CHARACTERS = ("\x00", "\x01", "\x1a", "\x1f", "\x7f", "\x85", "\t", "\n", "\r\n", "\ud800",
              "\udfff", "\u202e", "\u202d", "\u2066", "\u200b", "\u200d", "\u2028", "\ufeff",
              "\ufffd", "\U0001f680", "<", ">", "&", "'", '"', "%", "\\", "/", ".", " ", "..")
TEXTS = (
    "", " ", "a\x00b", "\u202eevil", "ad\u200bmin", "\ufeffacme", "acme\u202e", "..", "../..",
    "%00", "%2e%2e", "<script>alert(1)</script>", "' OR '1'='1", "${jndi:x}", "{{7*7}}",
    "x" * 10_000, "x" * 100_000, "\u00e9" * 10_000, "\U0001f680" * 10_000,
)
EMAILS = ("a" * 189 + "@example.com", "a" * 308 + "@example.com", "a" * 309 + "@example.com",
          "a" * 64 + "@" + ("b" * 63 + ".") * 4 + "com", "\u202e@example.com",
          "a\x00@example.com", "@", "a@" + "b" * 100_000)
# An offset that takes a moment off the calendar, and the calendar's own first and last.
CALENDAR_EDGES = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
                  "0001-01-01T00:00:00", "9999-12-31T23:59:59")
DATES = (*CALENDAR_EDGES, "0001-01-01", "9999-12-31", "0000-00-00T00:00:00Z",
         "2024-02-30T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:00:00+24:00",
         "9999-12-31T23:59:59.999999-23:59", "1970-01-01T00:00:00Z", "-0001-01-01T00:00:00Z",
         "99999-01-01T00:00:00Z", "1e308", "now")
INTEGERS = (-1, 0, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64,
            10**100, -(10**100))
FLOATS = (1e308, -1e308, 5e-324, 0.5, float("nan"), float("inf"), float("-inf"))
NUMBERS_AS_JSON = (Raw("1e400"), Raw("-0"), Raw("1" * 5_000), Raw("0.1e-99999"))
WRONG_TYPES: tuple[Any, ...] = (None, True, False, [], {}, [None], ["x"] * 1_000,
                                {"a": "b"}, "1", "true")


def hostile_characters() -> st.SearchStrategy[str]:
    parts = st.one_of(st.sampled_from(CHARACTERS), st.text("ab-.@", min_size=1, max_size=3))
    return st.lists(parts, min_size=1, max_size=6).map("".join)


def hostile_value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Any hostile value; half of them at this field's own bounds."""
    anything = st.one_of(
        hostile_characters(),
        st.sampled_from(TEXTS + EMAILS + DATES),
        st.sampled_from(INTEGERS + FLOATS + NUMBERS_AS_JSON),
        st.sampled_from(WRONG_TYPES + DEEP),
    )
    return st.one_of(st.sampled_from(_edges(schema)), anything)


def _edges(schema: dict[str, Any]) -> list[Any]:
    edges: list[Any] = []
    for limit in (schema.get("maxLength"), schema.get("minLength")):
        if isinstance(limit, int):
            edges += ["x" * limit, "x" * (limit + 1), "\u00e9" * (limit + 1),
                      "\u202e" + "x" * max(limit - 1, 0), "x" * max(limit - 1, 0)]
    for bound in (schema.get("maximum"), schema.get("minimum"),
                  schema.get("exclusiveMaximum"), schema.get("exclusiveMinimum")):
        if isinstance(bound, int | float):
            edges += [bound, bound + 1, bound - 1]
    if schema.get("format") in {"date-time", "date"}:
        edges += list(CALENDAR_EDGES)
    if schema.get("format") == "email" or "email" in schema.get("title", "").lower():
        edges += list(EMAILS)
    edges += list(schema.get("enum", []))[:1]
    # A field without a schema (a page's form field) gets a few bounds of every kind.
    return edges or [*EMAILS[:2], 2**31, 2**63, -1, *CALENDAR_EDGES[:2], "x" * 10_000]


# ----- where the values go


@dataclass(frozen=True)
class Slot:
    """One input of an operation: a path or query parameter, a header, a body field, or the
    whole body (``where`` "body" and no name)."""

    where: str
    name: str
    schema: dict[str, Any] = field(compare=False)


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    route: Route
    slots: tuple[Slot, ...]
    json_body: bool

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"


def api_operations(schema: dict[str, Any]) -> list[Operation]:
    operations = []
    for path, item in schema["paths"].items():
        for method, spec in item.items():
            slots = [Slot(p["in"], p["name"], _resolved(schema, p.get("schema", {})))
                     for p in spec.get("parameters", [])]
            body_schema = spec.get("requestBody", {}).get("content", {}).get(
                "application/json", {}).get("schema")
            if body_schema is not None:
                properties = _resolved(schema, body_schema).get("properties", {})
                slots += [Slot("body", name, _resolved(schema, prop))
                          for name, prop in properties.items()]
                slots.append(Slot("body", "", {}))
            operations.append(Operation(method.upper(), path, _route(method.upper(), path),
                                        tuple(slots), json_body=body_schema is not None))
    return operations


def page_form_posts(world: World) -> list[Operation]:
    operations = []
    for route in ROUTES:
        if route.method != "POST" or route.path.startswith("/api/"):
            continue
        slots = [Slot("path", name, {}) for name in re.findall(r"\{(\w+)\}", route.path)]
        # The fields of a valid post (route_access) are those the page's form sends.
        slots += [Slot("body", name, {}) for name in (route.body(world) if route.body else {})]
        operations.append(Operation("POST", route.path, route, tuple(slots), json_body=False))
    return operations


def page_reads() -> list[Operation]:
    """Every page GET that takes a path or query parameter (filters such as the audit log's
    and the usage pages' dates), with the query parameters FastAPI reads for it."""
    queries = {route.path: _query_slots(route.dependant)
               for router in all_routers() for route in router.routes
               if isinstance(route, APIRoute) and "GET" in (route.methods or set())}
    operations = []
    for route in ROUTES:
        if route.method != "GET" or route.path.startswith(("/api/", "/openapi", "/auth/")):
            continue
        slots = [Slot("path", name, {}) for name in re.findall(r"\{(\w+)\}", route.path)]
        slots += queries.get(route.path, [])
        if slots:
            operations.append(Operation("GET", route.path, route, tuple(slots), json_body=False))
    return operations


# Pages read moments as text, to answer a bad one inside the page: known by their names.
MOMENT_PARAMETERS = frozenset({"since", "until", "from", "to"})


def _query_slots(dependant: Dependant) -> list[Slot]:
    """The query parameters, with the bounds a schema would give (as the API's have)."""
    slots = []
    for param in dependant.query_params:
        schema: dict[str, Any] = {}
        for rule in param.field_info.metadata:
            for key, name in (("max_length", "maxLength"), ("ge", "minimum"), ("le", "maximum")):
                if hasattr(rule, key):
                    schema[name] = getattr(rule, key)
        if param.alias in MOMENT_PARAMETERS:
            schema["format"] = "date-time"
        slots.append(Slot("query", param.alias, schema))
    return slots + [slot for inner in dependant.dependencies for slot in _query_slots(inner)]


def _route(method: str, path: str) -> Route:
    return next(r for r in ROUTES if r.method == method and r.path == path)


def _resolved(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """A schema with its ``$ref`` followed and an optional (``anyOf`` with null) unwrapped."""
    if "$ref" in node:
        resolved: dict[str, Any] = schema["components"]["schemas"][node["$ref"].rsplit("/")[-1]]
        return _resolved(schema, resolved)
    options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        return {**node, **_resolved(schema, options[0])}
    return node


def replacements(operation: Operation) -> st.SearchStrategy[dict[Slot, Any]]:
    """One to three of the operation's inputs, each with a hostile value."""
    chosen = st.lists(st.sampled_from(operation.slots), min_size=1, max_size=3, unique=True)
    return chosen.flatmap(lambda slots: st.fixed_dictionaries(
        {slot: _whole_body() if slot.where == "body" and not slot.name
         else hostile_value(slot.schema) for slot in slots}))


def _whole_body() -> st.SearchStrategy[Any]:
    odd = (Raw(""), Raw("{"), Raw('"x"'), Raw("NaN"))
    return st.sampled_from(DEEP + NUMBERS_AS_JSON + WRONG_TYPES + odd)


# ----- requests


@dataclass
class Request:
    method: str
    url: str
    headers: dict[str, str | bytes]
    content: bytes

    def __str__(self) -> str:
        return (f"{self.method} {_abridged(self.url)} body {_abridged(self.content)} "
                f"({len(self.content)} bytes)")


def _abridged(text: str | bytes, keep: int = 160) -> str:
    if len(text) <= 2 * keep:
        return repr(text)
    return f"{text[:keep]!r} ... {text[-keep:]!r}"


def build_request(operation: Operation, world: World, caller: str,
                  values: dict[Slot, Any]) -> Request:
    path_values = {k: _url_part(v) for k, v in operation.route.params(world).items()}
    query: list[tuple[str, str]] = []
    headers: dict[str, str | bytes] = _caller_headers(operation, world, caller)
    for slot, value in values.items():
        if slot.where == "path":
            path_values[slot.name] = _url_part(value)
        elif slot.where == "query":
            query += [(slot.name, text) for text in _url_texts(value)]
        elif slot.where == "header":
            headers[slot.name] = _header_value(value)
    url = re.sub(r"\{(\w+)\}", lambda m: path_values[m.group(1)], operation.path)
    if query:
        url += "?" + urlencode(query, encoding="utf-8", errors="surrogatepass")
    base = operation.route.body(world) if operation.route.body else {}
    fields = {slot.name: value for slot, value in values.items()
              if slot.where == "body" and slot.name}
    whole = next((value for slot, value in values.items()
                  if slot.where == "body" and not slot.name), None)
    if operation.json_body:
        headers["content-type"] = "application/json"
        content = _json(whole if whole is not None else {**base, **fields})
    elif operation.path.startswith("/api/") or operation.method == "GET":
        content = b""
    else:
        headers["content-type"] = "application/x-www-form-urlencoded"
        form = [(k, text) for k, v in {**base, **fields}.items() for text in _texts(v)]
        content = urlencode(form, encoding="utf-8", errors="surrogatepass").encode()
    return Request(operation.method, url, headers, content)


def _caller_headers(operation: Operation, world: World, caller: str) -> dict[str, str | bytes]:
    known = world.callers[caller]
    if operation.path.startswith("/api/"):
        return {"accept": "application/json", **known.headers}
    headers: dict[str, str | bytes] = {"accept": "text/html"}
    if known.cookie:
        headers.update({"cookie": f"{PLAIN_COOKIE}={known.cookie}", "x-csrf-token": known.csrf})
    return headers


def _texts(value: Any) -> list[str]:
    """A value as the text a URL or form carries; a list repeats its key."""
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)] or [""]
    if isinstance(value, Raw):
        return [value.text]
    if isinstance(value, dict):
        return [json.dumps(value)]
    if value is None:
        return [""]
    return [str(value).lower() if isinstance(value, bool) else str(value)]


def _url_part(value: Any) -> str:
    return quote(_url_texts(value)[0].encode("utf-8", "surrogatepass"), safe="")


def _url_texts(value: Any) -> list[str]:
    """Past 8 kB a URL never reaches the app (servers refuse it); 600 characters (at most
    7,200 bytes encoded) are past every limit."""
    return [text[:URL_TEXT_LIMIT] for text in _texts(value)]


def _header_value(value: Any) -> bytes:
    """What a proxy passes on: no C0 controls but tab, no DEL, a bounded length."""
    encoded = "".join(_texts(value)).encode("utf-8", "surrogatepass")
    return bytes(b for b in encoded if (b >= 0x20 and b != 0x7F) or b == 0x09)[:8_000]


def _json(value: Any) -> bytes:
    """``value`` as JSON, ``Raw`` parts spliced in; NaN and Infinity as Python writes them."""
    raws: list[str] = []

    def placeholders(node: Any) -> Any:
        if isinstance(node, Raw):
            raws.append(node.text)
            return f"@@raw{len(raws) - 1}@@"
        if isinstance(node, dict):
            return {k: placeholders(v) for k, v in node.items()}
        if isinstance(node, list):
            return [placeholders(v) for v in node]
        return node

    text = json.dumps(placeholders(value))
    for index, raw in enumerate(raws):
        text = text.replace(f'"@@raw{index}@@"', raw)
    return text.encode("utf-8", "surrogatepass")


# ----- the sweep


class ServerError(Exception):
    """An answer of 500 or more: Hypothesis shrinks the request that got it."""


def answer(client: TestClient, request: Request) -> tuple[str | None, str | None]:
    """What is wrong with the answer: (a server error, security headers missing)."""
    client.cookies.clear()
    response = client.request(request.method, request.url, headers=request.headers,
                              content=request.content, follow_redirects=False)
    if response.status_code >= 500:  # its headers are reported with it, if missing
        missing = [name for name in SECURITY_HEADERS if name not in response.headers]
        lacking = f", without {', '.join(missing)}" if missing else ""
        return f"{response.status_code}{lacking} {response.text[:200]!r}", None
    missing = [name for name in SECURITY_HEADERS if name not in response.headers]
    return None, f"{response.status_code} without {', '.join(missing)}" if missing else None


def sweep(portal: Portal, operation: Operation, caller: str) -> list[str]:
    """This operation's failures for this caller: the first server error (shrunk to its
    simplest request), and the smallest request whose answer lacked a security header.

    Only a server error stops the search, so that answers without the headers (such as one
    kind of refusal everywhere) do not hide the server errors behind them."""
    errors: list[str] = []
    lacking: dict[int, str] = {}

    def sent(values: dict[Slot, Any]) -> None:
        request = build_request(operation, portal.world, caller, values)
        error, missing = answer(portal.client, request)
        where = f"{operation.label} as {caller}"
        if missing is not None:
            size = len(request.url) + len(request.content)
            lacking.setdefault(size, f"{where}: {missing}\n    {request}")
        if error is not None:
            errors[:] = [f"{where}: {error}\n    {request}"]
            raise ServerError(error)

    @seed(zlib.crc32(f"{operation.label} {caller}".encode()))
    @settings(max_examples=portal.examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              phases=(Phase.explicit, Phase.generate, Phase.shrink))
    @given(values=replacements(operation))
    def check(values: dict[Slot, Any]) -> None:
        sent(values)

    # Ten random draws rarely pair a date with an offset that leaves the calendar: every
    # moment gets those two as well.
    for slot in operation.slots:
        if slot.schema.get("format") == "date-time":
            for edge in CALENDAR_EDGES[:2]:
                check = example(values={slot: edge})(check)
    with contextlib.suppress(ServerError):
        check() if operation.slots else sent({})
    return [*errors, lacking[min(lacking)]] if lacking else errors


@dataclass
class Portal:
    client: TestClient
    world: World
    examples: int


@pytest.fixture(params=["postgresql", "sqlite"])
def portal(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Portal]:
    """The app and its world on PostgreSQL (where text wider than its column, or a number
    past a column's type, is an error) and on the embedded SQLite file."""
    fixture = "database" if request.param == "postgresql" else "sqlite_database"
    database: Database = request.getfixturevalue(fixture)
    with database.session() as db:
        world = build_world(db)
        db.commit()
        with TestClient(create_app(settings, database, kube=InMemoryConnector()),
                        raise_server_exceptions=False) as client:
            yield Portal(client, world, EXAMPLES[request.param])


def _run(portal: Portal, operations: list[Operation]) -> list[str]:
    # Deletions last, so that the operations before them find what they act on.
    ordered = sorted(operations, key=lambda o: o.method == "DELETE")
    return [problem for operation in ordered for caller in CALLERS
            if (operation.method, operation.path) not in NO_INPUT_THAT_SIGNS_OUT
            for problem in sweep(portal, operation, caller)]


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
def test_no_hostile_api_request_gets_a_server_error_or_loses_its_headers(portal: Portal) -> None:
    operations = api_operations(portal.client.app.openapi())  # type: ignore[attr-defined]
    assert len(operations) > 70
    failures = _run(portal, operations)
    assert not failures, "\n".join(failures)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
def test_no_hostile_page_form_post_gets_a_server_error_or_loses_its_headers(portal: Portal) -> None:
    operations = page_form_posts(portal.world)
    assert len(operations) > 40
    failures = _run(portal, operations)
    assert not failures, "\n".join(failures)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
def test_no_hostile_page_query_gets_a_server_error_or_loses_its_headers(portal: Portal) -> None:
    operations = page_reads()
    assert len(operations) > 15
    assert {"since", "until"} <= {slot.name for o in operations for slot in o.slots}
    failures = _run(portal, operations)
    assert not failures, "\n".join(failures)
