"""Control characters in any text the portal takes never end in a server error.

PostgreSQL refuses NUL in text and psycopg cannot encode a lone surrogate, so such text is a
422 before it reaches the database; other control characters are refused (URLs) or handled.
The sweeps walk every path and query parameter of every operation in the OpenAPI document,
with an admin's token, an unknown token and no credentials, and every string field of every
write's body (JSON for the API, form fields for the HTML pages).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.sessions import PLAIN_COOKIE
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from tests.authz.route_access import ROUTES, Route
from tests.authz.world import World
from tests.support.kube import InMemoryConnector

# Percent-encoded as a client would send them. Each is refused with a 422.
URL_REFUSED = ("%00", "a%00b", "%01", "%1F", "%7F", "%0A", "%0D%0A", "%09", "%C2%85")
# Invalid UTF-8 (a lone surrogate, a stray byte, an overlong NUL): decoded as U+FFFD, handled.
URL_HANDLED = ("%ED%A0%80", "%FF", "%C0%80")
# In JSON or form text. NUL and lone surrogates are always refused; the rest are refused or
# kept, as the field's own rules say, but never a server error.
TEXT_REFUSED = ("\x00", "a\x00b", "\ud800", "x\udfff")
TEXT_OTHER = ("\x01", "\x1f", "\x7f", "\t", "\n", "\x85")
# A JSON text whose string is the UTF-8 encoding of a lone surrogate (Python's json decoder
# passes it through as one).
RAW_SURROGATE = b"\xed\xa0\x80"

UNKNOWN_TOKEN = "gtp_" + "x" * 43
PLACEHOLDER = "@@control@@"


@pytest.fixture
def client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database, kube=InMemoryConnector()),
                    raise_server_exceptions=False) as test_client:
        yield test_client


def _operations(client: TestClient) -> list[tuple[str, str, dict[str, Any]]]:
    schema: dict[str, Any] = client.app.openapi()  # type: ignore[attr-defined]
    return [(method.upper(), path, operation)
            for path, item in schema["paths"].items()
            for method, operation in item.items()]


def _route(method: str, path: str) -> Route:
    return next(r for r in ROUTES if r.method == method and r.path == path)


def _parameters(operation: dict[str, Any], where: str) -> list[str]:
    return [p["name"] for p in operation.get("parameters", []) if p["in"] == where]


def _fill(path: str, values: dict[str, Any]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: str(values[m.group(1)]), path)


def _url_cases(client: TestClient, world: World) -> Iterator[tuple[str, str, str]]:
    """(method, url, control) for each path and query parameter and each control."""
    for method, path, operation in _operations(client):
        valid = _route(method, path).params(world)
        for control in URL_REFUSED + URL_HANDLED:
            for name in _parameters(operation, "path"):
                yield method, _fill(path, {**valid, name: control}), control
            for name in _parameters(operation, "query"):
                yield method, f"{_fill(path, valid)}?{name}={control}", control


def _headers(caller: str, world: World) -> dict[str, str]:
    if caller == "admin":
        return {**world.callers["platform_admin"].headers, "accept": "application/json"}
    if caller == "unknown token":
        return {"Authorization": f"Bearer {UNKNOWN_TOKEN}", "accept": "application/json"}
    return {"accept": "application/json"}


@pytest.mark.parametrize("caller", ["admin", "unknown token", "anonymous"])
def test_every_path_and_query_parameter_refuses_control_characters(
    client: TestClient, world: World, caller: str
) -> None:
    cases = list(_url_cases(client, world))
    assert len(cases) > 400
    for method, url, control in cases:
        response = client.request(method, url, headers=_headers(caller, world))
        assert response.status_code < 500, f"{method} {url}: {response.text[:300]}"
        if control in URL_REFUSED:
            assert response.status_code == 422, f"{method} {url}: {response.status_code}"
            assert response.headers["content-type"] == "application/problem+json"


def _string_fields(schema: dict[str, Any], body_schema: dict[str, Any]) -> list[str]:
    """The body's properties that take text (alone, in a union or in a list)."""
    model = _resolve(schema, body_schema)
    return [name for name, prop in model.get("properties", {}).items()
            if _takes_text(schema, prop)]


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        resolved: dict[str, Any] = schema["components"]["schemas"][name]
        return resolved
    return node


def _takes_text(schema: dict[str, Any], prop: dict[str, Any]) -> bool:
    prop = _resolve(schema, prop)
    if prop.get("type") == "string":
        return True
    if prop.get("type") == "array":
        return _takes_text(schema, prop.get("items", {}))
    return any(_takes_text(schema, option) for option in prop.get("anyOf", []))


# Write bodies that take no text at all (so the walker finding none is right): numbers, or
# choices nested in a list (a notification kind each; NUL in one is a 422 all the same).
NUMBERS_ONLY = {("POST", "/api/v1/tenants/{tenant}/clusters/{cluster}/template-upgrade"),
                ("PUT", "/api/v1/me/notification-preferences")}


def _operations_with_json_bodies(client: TestClient, world: World
                                 ) -> Iterator[tuple[str, str, str, Any, dict[str, Any]]]:
    """(method, path, url, route, body schema) of each operation taking a JSON body."""
    for method, path, operation in _operations(client):
        body_schema = operation.get("requestBody", {}).get("content", {}).get(
            "application/json", {}).get("schema")
        if body_schema is None:
            continue
        route = _route(method, path)
        assert route.body is not None, f"{method} {path} takes a body; route_access has none"
        yield method, path, _fill(path, route.params(world)), route, body_schema


def _json_bodies(client: TestClient, world: World) -> Iterator[tuple[str, str, str, bytes]]:
    """(method, url, field, body) with one string field set to a control text."""
    schema: dict[str, Any] = client.app.openapi()  # type: ignore[attr-defined]
    for method, path, url, route, body_schema in _operations_with_json_bodies(client, world):
        fields = _string_fields(schema, body_schema)
        assert fields or method == "PATCH" or (method, path) in NUMBERS_ONLY, (
            f"{method} {path}: no text fields found")
        for field in fields:
            is_list = _resolve(schema, _resolve(schema, body_schema)["properties"][field]).get(
                "type") == "array"
            template = json.dumps({**route.body(world), field: [PLACEHOLDER] if is_list
                                   else PLACEHOLDER}).encode()
            for control in TEXT_REFUSED + TEXT_OTHER:
                text = json.dumps(control).encode()
                yield method, url, field, template.replace(f'"{PLACEHOLDER}"'.encode(), text)
            yield method, url, field, template.replace(
                PLACEHOLDER.encode(), RAW_SURROGATE)


def _refused_text(body: bytes) -> bool:
    return b"\\u0000" in body or b"\\ud" in body or RAW_SURROGATE in body


def test_every_text_field_of_every_api_write_refuses_nul_and_lone_surrogates(
    client: TestClient, world: World
) -> None:
    headers = {**world.callers["platform_admin"].headers, "content-type": "application/json"}
    cases = list(_json_bodies(client, world))
    assert len(cases) > 100
    for method, url, field, body in cases:
        response = client.request(method, url, headers=headers, content=body)
        where = f"{method} {url} {field}={body!r}"
        assert response.status_code < 500, f"{where}: {response.text[:300]}"
        if _refused_text(body):
            assert response.status_code == 422, f"{where}: {response.status_code}"


WEB_WRITES = [r for r in ROUTES if r.method == "POST" and not r.path.startswith("/api/")
              and r.body is not None]
# Check boxes: any text but "on", "true", "1" or "yes" means unchecked; nothing is stored.
FORM_FLAGS = frozenset({"overcommit", "no_ceiling"})


def test_every_text_field_of_every_html_form_refuses_nul(
    client: TestClient, world: World
) -> None:
    caller = world.callers["platform_admin"]
    client.cookies.set(PLAIN_COOKIE, caller.cookie or "")
    headers = {"accept": "text/html", "x-csrf-token": caller.csrf}
    for route in WEB_WRITES:
        url = _fill(route.path, route.params(world))
        assert route.body is not None
        for field in route.body(world):
            for control in TEXT_REFUSED + TEXT_OTHER:
                fields = {**route.body(world), field: control}
                body = urlencode(fields, errors="surrogatepass").encode()
                response = client.post(url, headers={
                    **headers, "content-type": "application/x-www-form-urlencoded"},
                    content=body)
                where = f"POST {url} {field}={control!r}"
                assert response.status_code < 500, f"{where}: {response.text[:300]}"
                if "\x00" in control and field not in FORM_FLAGS:
                    assert response.status_code == 422, f"{where}: {response.status_code}"


def test_a_nul_in_a_json_field_is_a_422_naming_the_field(
    client: TestClient, world: World
) -> None:
    headers = world.callers["platform_admin"].headers
    cluster = client.post("/api/v1/tenants/acme/clusters", headers=headers,
                          json={"name": "in\x00fer", "gpus": 1})
    reason = client.post("/api/v1/tenants/acme/quota-requests", headers=headers,
                         json={"gpu_class_id": world.gpu_class_id, "gpus": 1,
                               "reason": "more\x00please"})
    for response, field in ((cluster, "name"), (reason, "reason")):
        assert response.status_code == 422
        assert response.headers["content-type"] == "application/problem+json"
        assert field in [error["field"] for error in response.json()["errors"]]


def test_an_unknown_token_with_odd_text_in_it_or_the_path_is_refused_and_audited(
    client: TestClient, world: World, db: Session
) -> None:
    headers = {"Authorization": f"Bearer {UNKNOWN_TOKEN}"}
    nul = client.get("/api/v1/tenants/a%00b", headers=headers)
    odd = client.get("/api/v1/tenants/a%ED%A0%80b", headers=headers)
    # Another route: the same caller's refusals on one route are written once a window.
    odd_token = client.get("/api/v1/tenants/acme/clusters", headers={
        "Authorization": b"Bearer gtp_\x00\x01\xff"})
    assert nul.status_code == 422
    assert odd.status_code == 401
    assert odd_token.status_code == 401
    denials = db.scalars(select(AuditEvent.target_id).where(
        AuditEvent.action == "authz.denied")).all()
    assert "GET /api/v1/tenants/a\ufffd\ufffd\ufffdb" in denials
    assert "GET /api/v1/tenants/acme/clusters" in denials


def test_unstorable_text_is_found_however_the_body_spells_it(
    client: TestClient, world: World
) -> None:
    """UTF-16 JSON and a multipart part in UTF-7 hide the character from a byte search."""
    headers = world.callers["platform_admin"].headers
    utf16 = client.post("/api/v1/tokens", headers={**headers, "content-type": "application/json"},
                        content=json.dumps({"name": "ci\ud800", "scopes": ["read"]},
                                           ensure_ascii=False).encode("utf-16", "surrogatepass"))
    caller = world.callers["platform_admin"]
    client.cookies.set(PLAIN_COOKIE, caller.cookie or "")
    boundary = "b0undary"
    multipart = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"tenant\"\r\n\r\n"
                 f"+AAA-\r\n--{boundary}--\r\n").encode()
    utf7 = client.post("/admin/fleet/assignments", content=multipart, headers={
        "x-csrf-token": caller.csrf,
        "content-type": f"multipart/form-data; boundary={boundary}; charset=utf-7"})
    for response, field, code in ((utf16, "name", "U+D800"), (utf7, "tenant", "NUL U+0000")):
        assert response.status_code == 422
        assert response.json()["errors"] == [
            {"field": field, "message": f"must not contain {code}"}]


def test_text_that_only_looks_like_an_escaped_nul_is_kept(
    client: TestClient, world: World
) -> None:
    headers = world.callers["platform_admin"].headers
    response = client.post("/api/v1/tenants/acme/quota-requests", headers=headers, json={
        "gpu_class_id": world.gpu_class_id, "gpus": 1, "region": "eu-west",
        "reason": "see \\u0000 and \U0001f680"})
    assert response.status_code == 201, response.text
    assert response.json()["reason"] == "see \\u0000 and \U0001f680"


# Unicode format characters (category Cf) are invisible but reorder or hide what is shown, so
# no text that people read may hold one. Secrets are never shown, and are checked for what
# they are (app/hosts/credentials.py).
FORMAT_CHARACTER = "\u202e"
NEVER_SHOWN = frozenset({("HostCredentialsIn", name)
                         for name in ("kubeconfig", "token", "ca_certificate")})


def _options(schema: dict[str, Any], prop: dict[str, Any]) -> list[dict[str, Any]]:
    prop = _resolve(schema, prop)
    return [_resolve(schema, option) for option in prop.get("anyOf", [prop])]


def _is_free_text(prop: dict[str, Any]) -> bool:
    """A string people type, not a choice (enum) or a parsed format (date-time, ...)."""
    return prop.get("type") == "string" and "enum" not in prop and "const" not in prop and (
        "format" not in prop)


def _free_text_fields(schema: dict[str, Any], node: dict[str, Any],
                      prefix: str = "") -> Iterator[tuple[str, bool]]:
    """(dotted field, takes a list) for each free-text field of a body, nested ones too (a
    list of objects through its first item, ``addons.0.name``)."""
    model = _resolve(schema, node)
    for name, prop in model.get("properties", {}).items():
        dotted = f"{prefix}{name}"
        if (model.get("title"), name) in NEVER_SHOWN:
            continue
        if any(option.get("type") == "number" for option in _options(schema, prop)):
            continue  # a number that may come as a string too (a Decimal: "0.5"), not text
        for option in _options(schema, prop):
            items = _options(schema, option.get("items", {}))
            if "properties" in option:
                yield from _free_text_fields(schema, option, f"{dotted}.")
            elif _is_free_text(option):
                yield dotted, False
            elif any("properties" in item for item in items):
                yield from (found for item in items if "properties" in item
                            for found in _free_text_fields(schema, item, f"{dotted}.0."))
            elif any(_is_free_text(item) for item in items):
                yield dotted, True
            elif isinstance(values := option.get("additionalProperties"), dict) and any(
                    _is_free_text(value) for value in _options(schema, values)):
                yield f"{dotted}.key", False  # a map's values (settings.key)


def _with_format_character(valid: object) -> str:
    """The valid value with the character inside it, so it is the only thing wrong."""
    text = valid if isinstance(valid, str) and valid else "ab"
    return text[:1] + FORMAT_CHARACTER + text[1:]


def _set(body: dict[str, Any], dotted: str, is_list: bool) -> dict[str, Any]:
    parts = dotted.split(".")
    node: Any = body
    for here, after in itertools.pairwise(parts):
        if isinstance(node, list):
            node.extend({} for _ in range(int(here) + 1 - len(node)))
            node = node[int(here)]
        else:
            node = node.setdefault(here, [] if after.isdigit() else {})
    valid = node.get(parts[-1])
    if is_list:
        first = valid[0] if isinstance(valid, list) and valid else None
        node[parts[-1]] = [_with_format_character(first)]
    else:
        node[parts[-1]] = _with_format_character(valid)
    return body


def _format_character_bodies(client: TestClient, world: World
                             ) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    schema: dict[str, Any] = client.app.openapi()  # type: ignore[attr-defined]
    for method, _path, url, route, body_schema in _operations_with_json_bodies(client, world):
        for dotted, is_list in dict.fromkeys(_free_text_fields(schema, body_schema)):
            yield method, url, dotted, _set(route.body(world), dotted, is_list)


def _audit_rows(db: Session) -> int:
    db.expire_all()
    return len(db.scalars(select(AuditEvent.id)).all())


def test_every_text_field_of_every_api_write_refuses_format_characters_naming_them(
    client: TestClient, world: World, db: Session
) -> None:
    headers = world.callers["platform_admin"].headers
    cases = list(_format_character_bodies(client, world))
    assert len(cases) > 40
    missed = []
    for method, url, field, body in cases:
        before = _audit_rows(db)
        response = client.request(method, url, headers=headers, json=body)
        errors = response.json().get("errors") or [] if response.status_code == 422 else []
        named = [e for e in errors if e["field"].split(".")[:len(field.split("."))]
                 == field.split(".") and "U+202E (RIGHT-TO-LEFT OVERRIDE)" in e["message"]]
        if not named or _audit_rows(db) != before:
            missed.append(f"{method} {url} {field}: {response.status_code} "
                          f"{response.text[:200]}")
    assert not missed, "\n".join(missed)


# Form fields that are not text: numbers, choices, check boxes and names typed to confirm.
# Each refuses or ignores the character (nothing is stored) without naming it.
NOT_TEXT = frozenset({
    "burst_gpus", "confirm_name", "cpu_millicores", "decision", "disabled", "expires_in_days",
    "format", "gpu_class_id", "gpu_count", "gpus", "kind", "kinds", "lifetime_seconds",
    "max_gpus", "memory_mib", "no_ceiling", "node", "overcommit", "placement", "port", "power",
    "role", "scopes", "sleep_after_idle_minutes", "state", "tenant", "tier"})
SECRET_FORM_FIELDS = frozenset({"kubeconfig", "token", "ca_certificate"})
# Optional text fields of the forms, beyond the bodies route_access sends (a valid value each).
FORM_TEXT_BEYOND_ROUTE_BODIES: dict[str, dict[str, str]] = {
    "/admin/tenants": {"admin_email": "ann@example.com"},
    "/admin/tenants/{tenant}": {"display_name": "Acme Research"},
    "/admin/quota-requests/{request_id}/approve": {"note": "granted"},
    "/t/{tenant}/clusters": {"region": "eu-west", "template": "default"},
    "/t/{tenant}/clusters/{cluster}/sleep-policy": {"sleep_schedule": "weekdays 20:00-08:00"},
    "/admin/cluster-templates": {
        "description": "for training",
        "addons": "kai oci://ghcr.io/nvidia/kai-scheduler kai-scheduler v0.9.3 tag=latest"},
    "/admin/cluster-templates/{name}/versions": {
        "kubernetes_version": "1.32.4",
        "addons": "kai oci://ghcr.io/nvidia/kai-scheduler kai-scheduler v0.9.3 tag=latest"},
    "/admin/hosts": {"region": "eu-west", "description": "hall 2",
                     "webhook_url": "https://webhook.example.com:9443"},
    "/admin/hosts/{name}": {"region": "eu-west",
                            "webhook_url": "https://webhook.example.com:9443"},
}


def test_every_text_field_of_every_html_form_refuses_format_characters_naming_them(
    client: TestClient, world: World, db: Session
) -> None:
    caller = world.callers["platform_admin"]
    client.cookies.set(PLAIN_COOKIE, caller.cookie or "")
    headers = {"accept": "text/html", "x-csrf-token": caller.csrf}
    missed = []
    for route in WEB_WRITES:
        url = _fill(route.path, route.params(world))
        assert route.body is not None
        fields = {**route.body(world), **FORM_TEXT_BEYOND_ROUTE_BODIES.get(route.path, {})}
        for field, valid in fields.items():
            if field in SECRET_FORM_FIELDS:
                continue
            before = _audit_rows(db)
            response = client.post(url, headers=headers, data={
                **route.body(world), field: _with_format_character(valid)})
            named = "U+202E (RIGHT-TO-LEFT OVERRIDE)" in response.text
            stored = _audit_rows(db) != before
            if stored or (field not in NOT_TEXT and (response.status_code != 422
                                                     or not named)):
                missed.append(f"POST {url} {field}: {response.status_code} named={named} "
                              f"stored={stored}")
    assert not missed, "\n".join(missed)
