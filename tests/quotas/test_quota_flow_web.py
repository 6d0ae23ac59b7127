"""The acceptance path in the browser: sign in through the OIDC flow, ask for 8 GPUs with the
htmx form, approve 6 from the admin queue, see 6 on the dashboard."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.models import User
from app.quotas.models import QuotaRequest
from app.tenants.models import Tenant
from tests import factories
from tests.support import oidc
from tests.support.capacity import queue_rows_of
from tests.support.web import HTML, csrf_of, htmx


def _acme_with_invited_admin(db: Session, oidc_issuer: str, email: str) -> int:
    """Tenant acme whose admin was invited by email and binds at first sign-in."""
    acme = factories.tenant(db, "acme")
    invited = User(email=email, name="")
    db.add(invited)
    db.flush()
    factories.membership(db, acme, invited, "admin")
    gpu = factories.gpu_class(db, display_name="H100 80GB")
    host = factories.host_cluster(db)
    for _ in range(2):
        factories.node(db, host, gpu, gpu_count=8)
    db.commit()
    oidc.register_user(oidc_issuer, email, name="Tess Admin")
    return gpu.id


def test_ask_for_8_approve_6_see_6(client: TestClient, db: Session, oidc_issuer: str) -> None:
    gpu_id = _acme_with_invited_admin(db, oidc_issuer, "tess@acme.example")
    oidc.sign_in(client, "tess@acme.example")
    form = client.get("/t/acme/quota-requests/new", headers=HTML)
    assert form.status_code == 200 and 'hx-post="/t/acme/quota-requests/validate"' in form.text
    csrf = csrf_of(form.text)
    fields = {"gpu_class_id": str(gpu_id), "gpus": "8", "reason": "fine-tuning", "ends_at": ""}
    sent = client.post("/t/acme/quota-requests", headers=htmx(csrf), data=fields)
    assert sent.status_code == 200 and sent.headers["HX-Redirect"] == "/t/acme"
    dashboard = client.get("/t/acme", headers=HTML)
    assert "pending" in dashboard.text

    oidc.sign_in(client, "admin@example.com")
    queue = client.get("/admin/quota-requests", headers=HTML)
    assert queue.status_code == 200
    [capacity] = queue_rows_of(queue.text).values()
    assert (capacity["total"], capacity["guaranteed"], capacity["free"]) == (16, 0, 16)
    request_id = db.scalars(select(QuotaRequest.id)).one()
    row = client.post(f"/admin/quota-requests/{request_id}/approve",
                      headers=htmx(csrf_of(queue.text)),
                      data={"gpus": "6", "note": "six for now"})
    assert row.status_code == 200
    assert row.text.lstrip().startswith(f'<tr id="queue-{request_id}"')
    assert "approved" in row.text and "6 GPUs" in row.text and "<html" not in row.text

    oidc.sign_in(client, "tess@acme.example")
    dashboard = client.get("/t/acme", headers=HTML)
    approved = re.search(r'<td class="approved">(\d+)</td>', dashboard.text)
    assert approved and approved.group(1) == "6"
    actions = list(db.scalars(select(AuditEvent.action).order_by(AuditEvent.id)))
    for action in ("quota_request.create", "quota_request.approve", "tenant_quota.change"):
        assert action in actions


def _error_of(page: str, field: str) -> str:
    found = re.search(rf'id="{field}-error"[^>]*>([^<]*)<', page)
    assert found, f"no error slot for {field}"
    return found.group(1).strip()


def test_the_form_validates_inline_and_writes_nothing_on_error(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = _acme_with_invited_admin(db, oidc_issuer, "ivy@acme.example")
    oidc.sign_in(client, "ivy@acme.example")
    csrf = csrf_of(client.get("/t/acme/quota-requests/new", headers=HTML).text)
    checked = client.post("/t/acme/quota-requests/validate",
                          headers={**htmx(csrf), "HX-Trigger-Name": "gpus"},
                          data={"gpu_class_id": str(gpu_id), "gpus": "1.5"})
    assert checked.status_code == 422
    assert _error_of(checked.text, "gpus") == "a whole number, such as 4"
    assert _error_of(checked.text, "reason") == ""  # not touched yet
    fine = client.post("/t/acme/quota-requests/validate", headers=htmx(csrf),
                       data={"gpu_class_id": str(gpu_id), "gpus": "2", "reason": "ok"})
    assert fine.status_code == 200
    assert all(_error_of(fine.text, f) == "" for f in ("gpus", "reason", "gpu_class_id"))
    refused = client.post("/t/acme/quota-requests", headers=htmx(csrf), data={
        "gpu_class_id": str(gpu_id), "gpus": "0", "reason": "x", "ends_at": "2001-01-01"})
    assert refused.status_code == 422
    assert "future" in _error_of(refused.text, "gpus") + _error_of(refused.text, "ends_at")
    assert db.scalars(select(QuotaRequest)).all() == []


def test_overcommit_is_asked_for_in_the_queue_row(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = _acme_with_invited_admin(db, oidc_issuer, "uma@acme.example")
    acme = db.scalars(select(Tenant).where(Tenant.slug == "acme")).one()
    request = QuotaRequest(tenant_id=acme.id, gpu_class_id=gpu_id, gpus=20, reason="lots")
    db.add(request)
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    csrf = csrf_of(client.get("/admin/quota-requests", headers=HTML).text)
    row = client.post(f"/admin/quota-requests/{request.id}/approve", headers=htmx(csrf),
                      data={"gpus": "20"})
    assert row.status_code == 409
    assert "confirm the overcommit" in row.text and 'name="overcommit"' in row.text
    forced = client.post(f"/admin/quota-requests/{request.id}/approve", headers=htmx(csrf),
                         data={"gpus": "20", "overcommit": "on"})
    assert forced.status_code == 200 and "(overcommitted)" in forced.text


def test_web_posts_without_the_csrf_token_are_refused(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = _acme_with_invited_admin(db, oidc_issuer, "vic@acme.example")
    oidc.sign_in(client, "vic@acme.example")
    response = client.post("/t/acme/quota-requests", headers={"HX-Request": "true"},
                           data={"gpu_class_id": str(gpu_id), "gpus": "2", "reason": "x"})
    assert response.status_code == 403
    assert db.scalars(select(QuotaRequest)).all() == []


def test_the_queue_pages_and_keeps_its_state_filter(client: TestClient, db: Session) -> None:
    acme, gpu = factories.tenant(db, "acme"), factories.gpu_class(db)
    for _ in range(52):
        factories.quota_request(db, acme, gpu, gpus=1)
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    first = client.get("/admin/quota-requests", headers=HTML)
    assert first.text.count('<tr id="queue-') == 50
    more = re.search(r'<a id="queue-more" href="([^"]+)"', first.text)
    assert more and "state=pending" in more.group(1)
    rest = client.get(more.group(1).replace("&amp;", "&"), headers=HTML)
    assert rest.text.count('<tr id="queue-') == 2 and 'id="queue-more"' not in rest.text


def test_a_class_with_mig_slices_only_is_not_offered_for_whole_gpus(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    h100 = _acme_with_invited_admin(db, oidc_issuer, "tess@acme.example")
    a100 = factories.gpu_class(db, "NVIDIA-A100-SXM4-80GB", display_name="A100 80GB")
    factories.node(db, factories.host_cluster(db), a100, gpu_count=0, mig_strategy="mixed",
                   mig_resources={"nvidia.com/mig-1g.10gb": 7})
    db.commit()
    oidc.sign_in(client, "tess@acme.example")
    form = client.get("/t/acme/quota-requests/new", headers=HTML).text
    # Issue 61: offered in its slices only, never for whole GPUs.
    assert not re.search(rf'<option value="{a100.id}"', form)
    assert re.search(rf'<option value="{a100.id}:mig:1g.10gb"\s*>A100 80GB '
                     r"\(NVIDIA-A100-SXM4-80GB\) — 1g.10gb slices</option>", form)
    assert re.search(rf'<option value="{h100}"\s*>H100 80GB', form)
