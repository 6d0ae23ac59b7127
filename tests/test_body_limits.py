"""A request body over the limit is a 413 that names the limit, before the body is read.

JSON, form and multipart alike, with or without a ``Content-Length``; nothing of it is stored.
Where a host cluster's credentials come in, a larger limit holds.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.sessions import PLAIN_COOKIE
from app.database.core import Database
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.process.asgi import create_app
from app.tenants.models import Tenant
from tests.authz.world import HOST_CA, HOST_KUBECONFIG, World
from tests.support.kube import InMemoryConnector
from tests.support.serving import serving

TEN_MB = 10 * 1024 * 1024
SECURITY_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options",
                    "referrer-policy", "x-request-id")


@pytest.fixture
def client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database, kube=InMemoryConnector()),
                    raise_server_exceptions=False) as test_client:
        yield test_client


def admin_api(world: World) -> dict[str, str]:
    return {**world.callers["platform_admin"].headers, "content-type": "application/json"}


def admin_page(client: TestClient, world: World) -> dict[str, str]:
    """Signed in as the platform admin in the browser; the CSRF token for its forms."""
    admin = world.callers["platform_admin"]
    client.cookies.set(PLAIN_COOKIE, admin.cookie or "")
    return {"csrf_token": admin.csrf}


def assert_too_large(response: httpx.Response, limit: int) -> None:
    assert response.status_code == 413, response.text[:300]
    assert response.headers["content-type"] == "application/problem+json"
    assert f"({limit} bytes)" in response.json()["detail"]
    for header in SECURITY_HEADERS:
        assert header in response.headers, header


def stored(db: Session, slug: str) -> bool:
    db.expire_all()
    return db.scalar(select(Tenant).where(Tenant.slug == slug)) is not None


def audit_rows(db: Session) -> int:
    return db.scalar(select(func.count()).select_from(AuditEvent)) or 0


@pytest.mark.parametrize("kind", ["json", "form", "multipart"])
def test_a_10_mb_body_is_a_413_and_nothing_is_stored(
        client: TestClient, world: World, db: Session, settings: Settings, kind: str) -> None:
    before = audit_rows(db)
    padding = "x" * TEN_MB
    if kind == "json":
        response = client.post("/api/v1/tenants", headers=admin_api(world), json={
            "slug": "huge", "display_name": "Huge", "padding": padding})
    else:
        fields = {**admin_page(client, world), "slug": "huge", "display_name": "Huge",
                  "padding": padding}
        if kind == "form":
            response = client.post("/admin/tenants", data=fields)
        else:
            response = client.post("/admin/tenants", files={
                name: (None, value) for name, value in fields.items()})
    assert_too_large(response, settings.max_body_bytes)
    assert not stored(db, "huge")
    assert audit_rows(db) == before


def _tenant_body(slug: str, size: int) -> bytes:
    """A tenant's JSON, padded with trailing whitespace (valid JSON) to ``size`` bytes."""
    body = json.dumps({"slug": slug, "display_name": slug.title()}).encode()
    return body + b" " * (size - len(body))


def test_a_body_of_exactly_the_limit_is_taken_one_byte_more_is_not(
        client: TestClient, world: World, db: Session, settings: Settings) -> None:
    limit = settings.max_body_bytes
    at_limit = client.post("/api/v1/tenants", headers=admin_api(world),
                           content=_tenant_body("at-limit", limit))
    assert at_limit.status_code == 201, at_limit.text[:300]
    over = client.post("/api/v1/tenants", headers=admin_api(world),
                       content=_tenant_body("over-limit", limit + 1))
    assert_too_large(over, limit)
    assert stored(db, "at-limit") and not stored(db, "over-limit")


def _chunks(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """Sent chunked, without a Content-Length."""
    for start in range(0, len(body), size):
        yield body[start:start + size]


@pytest.mark.parametrize("content_type", ["application/json", "application/octet-stream"])
def test_a_chunked_body_is_refused_once_it_passes_the_limit(
        client: TestClient, world: World, db: Session, settings: Settings,
        content_type: str) -> None:
    headers = {**admin_api(world), "content-type": content_type}
    response = client.post("/api/v1/tenants", headers=headers,
                           content=_chunks(_tenant_body("chunked", TEN_MB)))
    assert_too_large(response, settings.max_body_bytes)
    assert not stored(db, "chunked")


def test_a_chunked_body_within_the_limit_is_taken(
        client: TestClient, world: World, db: Session, settings: Settings) -> None:
    response = client.post("/api/v1/tenants", headers=admin_api(world),
                           content=_chunks(_tenant_body("chunked", settings.max_body_bytes)))
    assert response.status_code == 201, response.text[:300]
    assert stored(db, "chunked")


# A kubeconfig of about 250 KiB (comments): within the field's 256 KiB of text, but more than
# PORTAL_MAX_BODY_BYTES once escaped in JSON or encoded as a form.
LARGE_KUBECONFIG = HOST_KUBECONFIG + '# written by "tooling"\n' * 11_000


def _credentials_api(world: World) -> str:
    return f"/api/v1/host-clusters/{world.host_name}/credentials"


def test_host_credentials_over_the_default_limit_are_taken_on_the_api(
        client: TestClient, world: World, db: Session, settings: Settings) -> None:
    body = json.dumps({"kind": "kubeconfig", "kubeconfig": LARGE_KUBECONFIG}).encode()
    assert settings.max_body_bytes < len(body) < settings.max_upload_bytes
    response = client.put(_credentials_api(world), headers=admin_api(world), content=body)
    assert response.status_code == 200, response.text[:300]
    assert client.post("/api/v1/tenants", headers=admin_api(world),
                       content=_tenant_body("same-size", len(body))).status_code == 413


def test_host_credentials_over_the_default_limit_are_taken_on_the_page(
        client: TestClient, world: World, db: Session, settings: Settings) -> None:
    host = db.scalar(select(HostCluster).where(HostCluster.name == world.host_name))
    assert host is not None
    sealed_before = host.credentials_encrypted
    response = client.post(f"/admin/hosts/{world.host_name}/credentials", data={
        **admin_page(client, world), "kind": "kubeconfig", "kubeconfig": LARGE_KUBECONFIG},
        follow_redirects=False)
    assert response.status_code == 303, response.text[:300]
    assert response.headers["location"] == f"/admin/hosts/{world.host_name}"
    db.expire_all()
    assert host.credentials_encrypted != sealed_before


def test_host_credentials_over_their_own_limit_are_a_413(
        client: TestClient, world: World, settings: Settings) -> None:
    body = json.dumps({"kind": "token", "server": "https://matrix-host.invalid",
                       "token": "t" * settings.max_upload_bytes,
                       "ca_certificate": HOST_CA.cert_pem.decode()})
    response = client.put(_credentials_api(world), headers=admin_api(world), content=body)
    assert_too_large(response, settings.max_upload_bytes)


def test_a_declared_length_over_the_limit_is_answered_before_the_body_is_sent(
        settings: Settings, database: Database) -> None:
    """Over real HTTP: the headers alone get the 413; the body is never waited for."""
    with serving(settings, database, InMemoryConnector()) as base:
        address = urlsplit(base)
        with socket.create_connection((address.hostname, address.port), timeout=30) as conn:
            conn.sendall(b"POST /api/v1/tenants HTTP/1.1\r\nHost: portal\r\n"
                         b"Content-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % TEN_MB)
            answer = conn.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"x-frame-options: deny" in answer.lower()
