"""The issue's acceptance path over the API: ask for 8, approve 6, see 6; all audited."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.quotas.models import QuotaRequest, TenantQuota
from app.tenants.models import Membership
from tests.support.tenancy import build_tenancy, headers


def _actions(db: Session, tenant_id: int) -> list[str]:
    rows = db.scalars(select(AuditEvent.action).where(AuditEvent.tenant_id == tenant_id)
                      .order_by(AuditEvent.id))
    return list(rows)


def test_tenant_admin_asks_for_8_and_platform_admin_approves_6(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    tenant_admin, platform_admin = headers(db, t.acme_admin), headers(db, t.platform_admin)
    asked = client.post("/api/v1/tenants/acme/quota-requests", headers=tenant_admin, json={
        "gpu_class_id": t.h100.id, "gpus": 8, "reason": "fine-tuning run",
    })
    assert asked.status_code == 201, asked.text
    request_id = asked.json()["id"]
    assert asked.json()["state"] == "pending"

    queue = client.get("/api/v1/quota-requests?state=pending", headers=platform_admin).json()
    [item] = [i for i in queue["items"] if i["id"] == request_id]
    assert item["tenant"] == "acme"
    assert (item["tenant_quota_gpus"], item["tenant_allocated_gpus"]) == (0, 0)
    assert item["capacity"] == {
        "total": 64, "ready": 64, "not_ready": 0, "dedicated": 0, "assigned": 0,
        "guaranteed": 0, "shared_guaranteed": 0, "free": 64, "in_use": 0.0, "borrowed": 0.0,
        "lent_from_idle_guarantees": 0.0, "mig_resources": {},
        "shared_fraction_gpus": 0, "mig_profiles": [], "shared": None}

    approved = client.post(f"/api/v1/quota-requests/{request_id}/approve",
                           headers=platform_admin, json={"gpus": 6, "note": "6 for now"})
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert (body["state"], body["approved_gpus"], body["decision_note"]) == (
        "approved", 6, "6 for now")
    assert body["capacity"]["guaranteed"] == 6 and body["capacity"]["free"] == 58

    quota = client.get("/api/v1/tenants/acme/quota", headers=tenant_admin).json()
    assert [(q["gpu_class"], q["approved_gpus"], q["allocated_gpus"], q["in_use_gpus"])
            for q in quota["items"]] == [("NVIDIA-H100-80GB-HBM3", 6, 0, None)]  # no host read
    assert _actions(db, t.acme.id)[-3:] == [
        "quota_request.create", "quota_request.approve", "tenant_quota.change"]
    change = db.scalar(select(AuditEvent).where(AuditEvent.action == "tenant_quota.change"))
    assert change is not None and change.before is None and change.after is not None
    assert change.after["gpus"] == 6


def test_a_second_approval_adds_to_the_quota_with_before_and_after(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    admin, pa = headers(db, t.acme_admin), headers(db, t.platform_admin)
    for gpus in (4, 2):
        rid = client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json={
            "gpu_class_id": t.h100.id, "gpus": gpus, "reason": "more"}).json()["id"]
        assert client.post(f"/api/v1/quota-requests/{rid}/approve", headers=pa,
                           json={}).status_code == 200
    db.expire_all()
    quota = db.scalar(select(TenantQuota).where(TenantQuota.tenant_id == t.acme.id))
    assert quota is not None and quota.gpus == 6
    changes = db.scalars(select(AuditEvent).where(AuditEvent.action == "tenant_quota.change")
                         .order_by(AuditEvent.id)).all()
    assert changes[-1].before is not None and changes[-1].before["gpus"] == 4
    assert changes[-1].after is not None and changes[-1].after["gpus"] == 6


def test_deciding_twice_is_a_conflict_and_changes_nothing(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    admin, pa = headers(db, t.acme_admin), headers(db, t.platform_admin)
    rid = client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json={
        "gpu_class_id": t.h100.id, "gpus": 4, "reason": "x"}).json()["id"]
    assert client.post(f"/api/v1/quota-requests/{rid}/approve", headers=pa,
                       json={"gpus": 4}).status_code == 200
    again = client.post(f"/api/v1/quota-requests/{rid}/approve", headers=pa, json={"gpus": 4})
    assert again.status_code == 409
    assert again.headers["content-type"].startswith("application/problem+json")
    assert "approved already" in again.json()["detail"]
    assert client.post(f"/api/v1/quota-requests/{rid}/reject", headers=pa,
                       json={"note": "late"}).status_code == 409
    db.expire_all()
    quota = db.scalar(select(TenantQuota).where(TenantQuota.tenant_id == t.acme.id))
    assert quota is not None and quota.gpus == 4


def test_reject_and_cancel_leave_the_quota_alone(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    admin, pa = headers(db, t.acme_admin), headers(db, t.platform_admin)
    ids = [client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json={
        "gpu_class_id": t.h100.id, "gpus": 2, "reason": "x"}).json()["id"] for _ in range(2)]
    rejected = client.post(f"/api/v1/quota-requests/{ids[0]}/reject", headers=pa,
                           json={"note": "no budget"})
    assert (rejected.json()["state"], rejected.json()["decision_note"]) == (
        "rejected", "no budget")
    cancelled = client.post(f"/api/v1/tenants/acme/quota-requests/{ids[1]}/cancel",
                            headers=admin)
    assert cancelled.json()["state"] == "cancelled"
    assert client.post(f"/api/v1/tenants/acme/quota-requests/{ids[1]}/cancel",
                       headers=admin).status_code == 409
    assert db.scalar(select(TenantQuota).where(TenantQuota.tenant_id == t.acme.id)) is None
    listed = client.get("/api/v1/tenants/acme/quota-requests", headers=admin).json()["items"]
    assert [r["state"] for r in listed] == ["cancelled", "rejected"]


def test_approving_past_free_capacity_needs_an_explicit_overcommit(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db, nodes=1, gpus_per_node=8)
    admin, pa = headers(db, t.acme_admin), headers(db, t.platform_admin)
    rid = client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json={
        "gpu_class_id": t.h100.id, "gpus": 10, "reason": "big"}).json()["id"]
    refused = client.post(f"/api/v1/quota-requests/{rid}/approve", headers=pa, json={})
    assert refused.status_code == 409
    assert "would guarantee 10 of the 8 ready (8 free)" in refused.json()["detail"]
    assert refused.json()["errors"][0]["field"] == "overcommit"
    partial = client.post(f"/api/v1/quota-requests/{rid}/approve", headers=pa, json={"gpus": 8})
    assert partial.status_code == 200
    assert partial.json()["overcommitted"] is False
    rid2 = client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json={
        "gpu_class_id": t.h100.id, "gpus": 1, "reason": "one more"}).json()["id"]
    assert client.post(f"/api/v1/quota-requests/{rid2}/approve", headers=pa,
                       json={}).status_code == 409
    forced = client.post(f"/api/v1/quota-requests/{rid2}/approve", headers=pa,
                         json={"overcommit": True, "note": "burst"})
    assert forced.status_code == 200
    assert forced.json()["overcommitted"] is True
    assert forced.json()["capacity"] == {
        "total": 8, "ready": 8, "not_ready": 0, "dedicated": 0, "assigned": 0, "guaranteed": 9,
        "shared_guaranteed": 9, "free": -1, "in_use": 0.0, "borrowed": 0.0,
        "lent_from_idle_guarantees": 0.0, "mig_resources": {},
        "shared_fraction_gpus": 0, "mig_profiles": [], "shared": None}
    db.expire_all()
    stored = db.get(QuotaRequest, rid2)
    assert stored is not None and stored.overcommitted


def test_the_queue_filters_by_state_and_pages(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    admin, pa = headers(db, t.acme_admin), headers(db, t.platform_admin)
    ids = [client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json={
        "gpu_class_id": t.h100.id, "gpus": 1, "reason": "x"}).json()["id"] for _ in range(3)]
    client.post(f"/api/v1/quota-requests/{ids[0]}/reject", headers=pa, json={})
    first = client.get("/api/v1/quota-requests?state=pending&limit=1", headers=pa).json()
    assert [i["id"] for i in first["items"]] == [ids[1]]
    second = client.get(f"/api/v1/quota-requests?state=pending&limit=1&cursor="
                        f"{first['next_cursor']}", headers=pa).json()
    assert [i["id"] for i in second["items"]] == [ids[2]] and second["next_cursor"] is None
    assert client.get("/api/v1/quota-requests?state=bogus", headers=pa).status_code == 422


def test_idempotency_key_replays_a_quota_request(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    admin = {**headers(db, t.acme_admin), "Idempotency-Key": "req-1"}
    body = {"gpu_class_id": t.h100.id, "gpus": 3, "reason": "retry-safe"}
    first = client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json=body)
    again = client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json=body)
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert again.headers.get("Idempotent-Replayed") == "true"
    count = db.scalars(select(QuotaRequest).where(QuotaRequest.tenant_id == t.acme.id)).all()
    assert len(count) == 1


def test_a_replay_is_authorized_again(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    admin = {**headers(db, t.acme_admin), "Idempotency-Key": "req-2"}
    body = {"gpu_class_id": t.h100.id, "gpus": 3, "reason": "before removal"}
    assert client.post("/api/v1/tenants/acme/quota-requests", headers=admin,
                       json=body).status_code == 201
    db.execute(update(Membership).where(Membership.user_id == t.acme_member.id)
               .values(role="admin"))  # the tenant keeps an admin
    membership = db.scalar(select(Membership.id).where(Membership.user_id == t.acme_admin.id))
    assert client.delete(f"/api/v1/tenants/acme/members/{membership}",
                         headers=headers(db, t.platform_admin)).status_code == 204
    replay = client.post("/api/v1/tenants/acme/quota-requests", headers=admin, json=body)
    assert replay.status_code == 404
    assert "Idempotent-Replayed" not in replay.headers
