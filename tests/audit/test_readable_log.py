"""The audit log as a person reads it: targets by name (also once they are gone), changes field
by field, filters that work as plain links and with htmx, sign-ins out of the way."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.audit import service as audit
from tests import factories
from tests.support import oidc
from tests.support.principals import bearer
from tests.support.web import HTML, csrf_of, htmx


def _rows(page: str) -> list[str]:
    return re.findall(r'<tr data-event="\d+".*?</tr>', page, flags=re.S)


def _row_of(page: str, action: str) -> str:
    found = [row for row in _rows(page) if f'data-action="{action}"' in row]
    assert found, f"no {action} row"
    return found[0]


def _action_of(row: str) -> str:
    found = re.search(r'data-action="([^"]+)"', row)
    assert found
    return found.group(1)


def _target_of(row: str) -> str:
    found = re.search(r'<td class="target"[^>]*>(.*?)</td>', row, flags=re.S)
    assert found
    return found.group(1).strip()


def test_targets_are_named_as_people_say_them(client: TestClient, db: Session) -> None:
    acme = factories.tenant(db, "acme", display_name="Acme Research")
    gpu = factories.gpu_class(db, display_name="H100 80GB")
    host = factories.host_cluster(db)
    factories.node(db, host, gpu, gpu_count=8)
    ada = factories.user(db, "ada@acme.example")
    factories.membership(db, acme, ada, "admin")
    db.commit()
    as_ada = bearer(db, ada)
    asked = client.post(
        "/api/v1/tenants/acme/quota-requests",
        headers=as_ada,
        json={"gpu_class_id": gpu.id, "gpus": 4, "reason": "training"},
    )
    assert asked.status_code == 201, asked.text
    request_id = asked.json()["id"]
    platform = bearer(db, factories.user(db, admin=True))
    approved = client.post(
        f"/api/v1/quota-requests/{request_id}/approve",
        headers=platform,
        json={"gpus": 4, "note": "ok"},
    )
    assert approved.status_code == 200, approved.text
    added = client.post(
        "/api/v1/tenants/acme/members",
        headers=as_ada,
        json={"email": "bo@acme.example", "role": "member"},
    )
    assert added.status_code == 201, added.text
    removed = client.delete(f"/api/v1/tenants/acme/members/{added.json()['id']}", headers=as_ada)
    assert removed.status_code == 204

    oidc.sign_in(client, "admin@example.com")
    page = client.get("/audit", headers=HTML).text
    request_name = f"H100 80GB quota request #{request_id} (acme)"
    assert _target_of(_row_of(page, "quota_request.create")) == request_name
    assert _target_of(_row_of(page, "quota_request.approve")) == request_name
    assert _target_of(_row_of(page, "tenant_quota.change")) == "H100 80GB quota of acme"
    # The membership is gone; its events still say whose it was.
    assert _target_of(_row_of(page, "membership.delete")) == "bo@acme.example in acme"
    assert _target_of(_row_of(page, "membership.create")) == "bo@acme.example in acme"
    created = _row_of(page, "quota_request.create")
    assert "Acme Research" in created
    # The class by its name; its id, which the event also records, stays out of the way.
    assert (
        '<li data-field="gpu class"><span class="field">gpu class</span>: <ins>H100 80GB</ins>'
        in (created)
    )
    assert "gpu class id" not in created
    assert ">quota_request 1<" not in page and ">tenant_quota " not in page

    listed = client.get("/api/v1/audit?action=quota_request.approve", headers=platform).json()
    assert listed["items"][0]["target_label"] == request_name
    assert listed["items"][0]["target_type"] == "quota_request"  # the API keeps its shape


def test_an_event_recorded_without_a_label_reads_by_kind_and_id(
    client: TestClient, db: Session
) -> None:
    audit.record(
        db,
        action="tenant_quota.change",
        actor_id=None,
        actor_label="ops@example.com",
        target_type="tenant_quota",
        target_id=2,
    )
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/audit", headers=HTML).text
    assert _target_of(_row_of(page, "tenant_quota.change")) == "quota #2"


def test_a_change_shows_only_the_fields_that_changed(client: TestClient, db: Session) -> None:
    acme = factories.tenant(db, "acme")
    long_reason = "x" * 400
    audit.record(
        db,
        action="quota_request.approve",
        actor_id=None,
        actor_label="ops@example.com",
        tenant_id=acme.id,
        target_type="quota_request",
        target_id=1,
        before={"state": "pending", "gpus": 8, "note": "", "approved_gpus": None},
        after={"state": "approved", "gpus": 8, "note": long_reason, "approved_gpus": 6},
    )
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    row = _row_of(client.get("/audit", headers=HTML).text, "quota_request.approve")
    changed = dict(re.findall(r'<li data-field="([^"]+)">(.*?)</li>', row, flags=re.S))
    assert set(changed) == {"state", "note", "approved gpus"}  # gpus stayed 8
    assert re.sub(r"<[^>]+>", "", changed["state"]) == "state: pending → approved"
    assert re.sub(r"<[^>]+>", "", changed["approved gpus"]) == "approved gpus: none → 6"
    assert "{&#34;" not in row and '{"' not in row  # no raw JSON


def test_sign_ins_are_hidden_until_asked_for(client: TestClient, db: Session) -> None:
    acme = factories.tenant(db, "acme")
    audit.record(
        db,
        action="tenant.update",
        actor_id=None,
        actor_label="ops@example.com",
        tenant_id=acme.id,
        target_type="tenant",
        target_id="acme",
    )
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/audit", headers=HTML).text
    assert 'data-action="tenant.update"' in page
    assert 'data-action="auth.sign_in"' not in page
    toggle = re.search(r'<a id="sign-ins-toggle" href="([^"]+)">Show sign-ins</a>', page)
    assert toggle
    shown = client.get(toggle.group(1).replace("&amp;", "&"), headers=HTML).text
    assert 'data-action="auth.sign_in"' in shown
    assert re.search(r'<a id="sign-ins-toggle" href="[^"]+">Hide sign-ins</a>', shown)
    # The API keeps listing everything unless asked to leave sign-ins out.
    platform = bearer(db, factories.user(db, admin=True))
    everything = client.get("/api/v1/audit", headers=platform).json()["items"]
    assert "auth.sign_in" in {e["action"] for e in everything}
    without = client.get("/api/v1/audit?sign_ins=false", headers=platform).json()["items"]
    assert "auth.sign_in" not in {e["action"] for e in without}
    assert "tenant.update" in {e["action"] for e in without}


def test_filters_work_as_plain_links_and_with_htmx(client: TestClient, db: Session) -> None:
    acme, globex = factories.tenant(db, "acme"), factories.tenant(db, "globex")
    for tenant, action in ((acme, "tenant.update"), (globex, "node.assign"), (acme, "node.assign")):
        audit.record(
            db,
            action=action,
            actor_id=None,
            actor_label=f"ops@{tenant.slug}.example",
            tenant_id=tenant.id,
            target_type="tenant",
            target_id=tenant.slug,
        )
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/audit", headers=HTML).text
    # A form left blank (every field sent empty) lists everything.
    blank = client.get("/audit?tenant=&actor=&action=&since=&until=", headers=HTML)
    assert blank.status_code == 200 and len(_rows(blank.text)) == len(_rows(page))
    # The tenant and actor in each row are links that filter by them.
    assert 'href="/audit?tenant=globex"' in page
    assert 'href="/audit?actor=ops%40acme.example"' in page
    by_link = client.get("/audit?tenant=acme&action=node.", headers=HTML).text
    assert [_action_of(row) for row in _rows(by_link)] == ["node.assign"]
    assert '<option value="node." selected>Nodes</option>' in by_link
    swapped = client.get(
        "/audit?actor=ops@globex.example&since=2000-01-01T00:00",
        headers={**htmx(csrf_of(page)), "HX-Target": "audit-results"},
    )
    assert swapped.text.lstrip().startswith('<section id="audit-results"')
    assert "<html" not in swapped.text
    assert len(_rows(swapped.text)) == 1 and "ops@globex.example" in swapped.text
    bad = client.get("/audit?since=yesterday", headers=HTML)
    assert bad.status_code == 422


def test_older_events_come_as_rows_and_as_a_plain_link(client: TestClient, db: Session) -> None:
    acme = factories.tenant(db, "acme")
    for _ in range(3):
        audit.record(
            db,
            action="node.assign",
            actor_id=None,
            actor_label="ops@example.com",
            tenant_id=acme.id,
            target_type="node",
            target_id="h/n1",
        )
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/audit?action=node.&limit=2", headers=HTML).text
    more = re.search(r'<a class="button" href="(/audit\?[^"]+)"', page)
    assert more and "action=node." in more.group(1)
    href = more.group(1).replace("&amp;", "&")
    older = client.get(href, headers={"HX-Request": "true", "HX-Target": "audit-more"}).text
    assert older.lstrip().startswith("<tr") and len(_rows(older)) == 1
    assert len(_rows(client.get(href, headers=HTML).text)) == 1
