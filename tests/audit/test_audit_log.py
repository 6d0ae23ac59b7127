"""The audit trail: what is recorded, who may read it, and that it cannot be rewritten."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.audit.models import AuditEvent
from app.audit.schemas import AuditEventOut
from app.database.core import Database, utcnow
from app.http.pagination import Page
from tests import factories
from tests.support import oidc
from tests.support.principals import bearer


def test_sign_in_is_audited_with_the_request_id(client: TestClient, db: Session) -> None:
    response = oidc.sign_in(client, "bob@example.com")
    event = db.scalar(select(AuditEvent).where(AuditEvent.action == "auth.sign_in"))
    assert event is not None
    assert event.actor_label == "bob@example.com"
    assert event.request_id == response.headers["x-request-id"]
    assert event.occurred_at.tzinfo is not None


def test_a_denied_request_is_audited(client: TestClient, db: Session) -> None:
    outsider = factories.user(db)
    factories.tenant(db, "acme")
    response = client.get("/api/v1/tenants/acme/group-mappings", headers=bearer(db, outsider))
    assert response.status_code == 404
    denial = db.scalar(select(AuditEvent).where(AuditEvent.action == "authz.denied"))
    assert denial is not None
    assert denial.actor_id == outsider.id
    assert denial.target_id == "GET /api/v1/tenants/acme/group-mappings"


def test_secrets_never_reach_the_audit_trail(db: Session) -> None:
    audit.record(db, action="x", actor_id=None,
                 after={"token": "gtp_secret", "kubeconfig": "apiVersion: v1"})
    stored = db.scalar(select(AuditEvent.after).where(AuditEvent.action == "x"))
    assert stored == {"token": "[redacted]", "kubeconfig": "[redacted]"}


def _seed(db: Session) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    acme, globex = factories.tenant(db, "acme"), factories.tenant(db, "globex")
    acme_admin, viewer = factories.user(db), factories.user(db)
    factories.membership(db, acme, acme_admin, "admin")
    factories.membership(db, acme, viewer, "viewer")
    for tenant in (acme, globex):
        audit.record(db, action="tenant.rename", actor_id=None, actor_label="ops@example.com",
                     tenant_id=tenant.id, target_type="tenant", target_id=tenant.slug)
    audit.record(db, action="quota.approve", actor_id=None, actor_label="ops@example.com",
                 tenant_id=acme.id)
    platform = factories.user(db, admin=True)
    return bearer(db, acme_admin), bearer(db, viewer), bearer(db, platform)


def test_a_tenant_admin_sees_only_their_tenants_events(client: TestClient, db: Session) -> None:
    acme_admin, _viewer, platform = _seed(db)
    mine = client.get("/api/v1/audit", headers=acme_admin).json()["items"]
    assert {e["tenant"] for e in mine} == {"acme"}
    everything = client.get("/api/v1/audit", headers=platform).json()["items"]
    assert {"acme", "globex"} <= {e["tenant"] for e in everything}
    assert client.get("/api/v1/audit?tenant=globex", headers=acme_admin).status_code == 404


def test_viewers_cannot_read_the_audit_log(client: TestClient, db: Session) -> None:
    _admin, viewer, _platform = _seed(db)
    assert client.get("/api/v1/audit", headers=viewer).status_code == 403


def test_filters_and_pagination(client: TestClient, db: Session) -> None:
    _admin, _viewer, platform = _seed(db)
    only = client.get("/api/v1/audit?tenant=acme&action=quota.", headers=platform).json()
    assert [e["action"] for e in only["items"]] == ["quota.approve"]
    by_actor = client.get("/api/v1/audit?actor=ops@example.com", headers=platform).json()
    assert len(by_actor["items"]) == 3
    future = (utcnow() + timedelta(hours=1)).isoformat()
    later = client.get("/api/v1/audit", params={"since": future}, headers=platform).json()
    assert later["items"] == []
    first = client.get("/api/v1/audit?limit=2", headers=platform).json()
    second = client.get(f"/api/v1/audit?limit=2&cursor={first['next_cursor']}",
                        headers=platform).json()
    ids = [e["id"] for e in first["items"] + second["items"]]
    assert ids == sorted(ids, reverse=True)
    assert len(set(ids)) == len(ids)


def test_the_audit_page_lists_events_for_a_tenant_admin(client: TestClient, db: Session) -> None:
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/audit?sign_ins=true", headers={"accept": "text/html"})
    assert page.status_code == 200
    assert "auth.sign_in" in page.text


@pytest.mark.parametrize("backend", ["database", "sqlite_database"])
def test_audit_events_cannot_be_changed_or_deleted(
    backend: str, request: pytest.FixtureRequest
) -> None:
    database: Database = request.getfixturevalue(backend)
    with database.session() as db:
        audit.record(db, action="x", actor_id=None)
        event = db.scalars(select(AuditEvent).where(AuditEvent.action == "x")).one()
        for statement in ("UPDATE audit_events SET action = 'y'", "DELETE FROM audit_events"):
            with pytest.raises(DBAPIError, match="append-only"), db.begin_nested():
                db.execute(text(statement))
        assert db.get(AuditEvent, event.id) is not None


def test_the_audit_list_answers_as_its_response_model_would(
    client: TestClient, db: Session
) -> None:
    """The list is encoded without FastAPI's response model; its bytes must not drift."""
    _admin, _viewer, platform = _seed(db)
    audit.record(db, action="test.odd_values", actor_id=None, actor_label="",
                 target_type="test", target_id="1",
                 before={"ratio": 0.1, "big": 10**20, "when": None}, after={"n": [1, "x"]})
    db.commit()
    listed = client.get("/api/v1/audit?limit=200", headers=platform)
    assert listed.headers["content-type"] == "application/json"
    odd = next(e for e in listed.json()["items"] if e["action"] == "test.odd_values")
    assert (odd["actor"], odd["tenant"], odd["before"]["big"]) == ("system", None, 10**20)
    page = TypeAdapter(Page[AuditEventOut])
    assert page.dump_json(page.validate_json(listed.content)) == listed.content
