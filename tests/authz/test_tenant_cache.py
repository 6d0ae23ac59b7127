"""Tenants remembered by slug across requests: never past a change made through this portal, at
most a few seconds past one made elsewhere, and who may see one is still decided every time."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.auth import principal_cache
from app.database.core import Database
from app.kit.config import Settings
from app.tenants.access import cache_tenants, tenant_for
from app.tenants.models import Tenant
from tests.support.sql import statements_during
from tests.support.tenancy import build_tenancy, headers

NEW_MEMBER = {"email": "new@example.com", "role": "viewer"}


def test_a_second_request_for_a_tenant_does_not_look_it_up_again(
    client: TestClient, db: Session, database: Database
) -> None:
    t = build_tenancy(db)
    member = headers(db, t.acme_member)
    assert client.get("/api/v1/tenants/acme/clusters", headers=member).status_code == 200
    again = statements_during(
        database, lambda: client.get("/api/v1/tenants/acme/clusters", headers=member))
    assert again, "the clusters are still read"
    assert not [s for s in again if "FROM tenants" in s and "tenants.slug" in s]


def test_a_cached_tenant_stays_hidden_from_a_caller_of_another_tenant(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    assert client.get("/api/v1/tenants/acme",
                      headers=headers(db, t.acme_member)).status_code == 200
    assert client.get("/api/v1/tenants/acme",
                      headers=headers(db, t.globex_admin)).status_code == 404


def test_a_tenant_suspended_through_the_portal_is_read_only_at_once(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    admin = headers(db, t.acme_admin)
    assert client.get("/api/v1/tenants/acme", headers=admin).json()["state"] == "active"
    suspended = client.patch("/api/v1/tenants/acme", json={"state": "suspended"},
                             headers=headers(db, t.platform_admin))
    assert suspended.status_code == 200, suspended.text
    assert client.get("/api/v1/tenants/acme", headers=admin).json()["state"] == "suspended"
    refused = client.post("/api/v1/tenants/acme/members", json=NEW_MEMBER, headers=admin)
    assert refused.status_code == 403
    assert "suspended" in refused.json()["detail"]


def test_a_change_made_elsewhere_applies_once_the_cache_time_is_up(
    client: TestClient, db: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = build_tenancy(db)
    admin = headers(db, t.acme_admin)
    assert client.get("/api/v1/tenants/acme", headers=admin).status_code == 200
    # Another replica (or an operator's SQL) suspends the tenant: this process is not told,
    # so for a few seconds it goes by what it read.
    db.execute(update(Tenant).where(Tenant.slug == "acme").values(state="suspended"))
    assert client.post("/api/v1/tenants/acme/members", json=NEW_MEMBER,
                       headers=admin).status_code == 201
    later = principal_cache.monotonic() + settings.auth_cache_seconds
    monkeypatch.setattr(principal_cache, "monotonic", lambda: later)
    assert client.post("/api/v1/tenants/acme/members", json={**NEW_MEMBER, "email": "x@e.com"},
                       headers=admin).status_code == 403


def test_a_cached_tenant_never_overwrites_what_a_session_changed_on_it(
    database: Database, db: Session
) -> None:
    cache_tenants(database, 60)
    t = build_tenancy(db)
    db.commit()
    principal = t.principal(t.platform_admin)
    with database.session() as first:
        tenant_for(first, principal, "acme")  # now cached
    with database.session() as session:
        acme = session.get(Tenant, t.acme.id)
        assert acme is not None
        acme.display_name = "Renamed, not yet flushed"
        assert tenant_for(session, principal, "acme") is acme
        assert acme.display_name == "Renamed, not yet flushed"
