"""Issue 61 over the API: quota of MIG slices and of shares of one GPU is asked, refused in
words when the fleet cannot give it, approved against the free slices or hundredths, and shown
in words; whole GPUs of a MIG-only class are refused with the slices to ask for instead."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.database.core import utcnow
from app.quotas.models import QuotaRequest, TenantQuota
from app.quotas.service import expire_quotas
from tests.quotas.units_fleet import SLICES_MESSAGE, UnitsFleet, units_fleet
from tests.support.tenancy import headers

REQUESTS = "/api/v1/tenants/acme/quota-requests"


def _ask(client: TestClient, db: Session, fleet: UnitsFleet, **fields: Any) -> Any:
    return client.post(REQUESTS, headers=headers(db, fleet.t.acme_admin),
                       json={"reason": "notebooks", **fields})


def _approve(client: TestClient, db: Session, fleet: UnitsFleet, request_id: int,
             **fields: Any) -> Any:
    return client.post(f"/api/v1/quota-requests/{request_id}/approve",
                       headers=headers(db, fleet.t.platform_admin), json=fields)


def _refusal(answer: Any) -> tuple[int, list[dict[str, str]]]:
    return answer.status_code, answer.json().get("errors", [])


def test_whole_gpus_of_a_mig_only_class_are_refused_naming_its_slices(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    answer = _ask(client, db, fleet, gpu_class_id=fleet.a100.id, gpus=2)
    assert _refusal(answer) == (422, [{"field": "gpus", "message": SLICES_MESSAGE}])
    assert db.scalar(select(QuotaRequest.id)) is None


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"gpus": 1, "slices": 2, "mig_profile": "1g.10gb"}, "slices",
     "give only one of gpus, slices (with mig_profile) and gpu_share"),
    ({}, "gpus", "give gpus, slices with mig_profile, or gpu_share"),
    ({"slices": 2}, "mig_profile", "name the MIG profile of the slices, such as 1g.10gb"),
    ({"gpus": 2, "mig_profile": "1g.10gb"}, "mig_profile", "only MIG slices have a profile"),
    ({"slices": 2, "mig_profile": "2g.20gb"}, "mig_profile",
     "A100 SXM4 80GB has no 2g.20gb slices in the fleet: ask for slices of 1g.10gb (14 in the "
     "fleet), 3g.40gb (4) or 7g.80gb (2)"),
])
def test_a_request_of_slices_is_refused_in_words(client: TestClient, db: Session,
                                                 fields: dict[str, Any], field: str,
                                                 message: str) -> None:
    fleet = units_fleet(db)
    answer = _ask(client, db, fleet, gpu_class_id=fleet.a100.id, **fields)
    assert _refusal(answer) == (422, [{"field": field, "message": message}])


def test_a_profile_kai_cannot_count_is_refused(client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    answer = _ask(client, db, fleet, gpu_class_id=fleet.a100.id, slices=1,
                  mig_profile="1g.10gb+me")
    status, [error] = _refusal(answer)
    assert (status, error["field"]) == (422, "mig_profile")
    assert "KAI Scheduler cannot count" in error["message"]


@pytest.mark.parametrize(("share", "message"), [
    ("1.5", "a share is at most one GPU; ask for whole GPUs"),
    ("0.3", "a share of H100 80GB is asked in steps of 0.25 of a GPU: one of 0.25, 0.5, 0.75, 1"),
])
def test_a_share_is_refused_in_words(client: TestClient, db: Session, share: str,
                                     message: str) -> None:
    fleet = units_fleet(db)
    answer = _ask(client, db, fleet, gpu_class_id=fleet.h100.id, gpu_share=share)
    assert _refusal(answer) == (422, [{"field": "gpu_share", "message": message}])


def test_a_share_of_a_class_not_shared_or_without_whole_gpus_is_refused(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db, share_step=None)
    not_shared = _ask(client, db, fleet, gpu_class_id=fleet.h100.id, gpu_share="0.5")
    assert _refusal(not_shared) == (422, [{
        "field": "gpu_share",
        "message": "H100 80GB is not offered in shares of one GPU: ask for whole GPUs"}])
    fleet.a100.share_step = 50
    db.flush()
    no_whole = _ask(client, db, fleet, gpu_class_id=fleet.a100.id, gpu_share="0.5")
    assert _refusal(no_whole) == (422, [{
        "field": "gpu_share", "message": "A100 SXM4 80GB has no whole GPUs in the fleet to share"}])


def test_slices_are_asked_approved_in_part_and_held_as_quota_in_words(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    asked = _ask(client, db, fleet, gpu_class_id=fleet.a100.id, slices=3, mig_profile="1g.10gb")
    assert asked.status_code == 201, asked.text
    body = asked.json()
    assert {key: body[key] for key in ("gpus", "unit", "mig_profile", "slices", "gpu_share",
                                       "grant", "approved_grant")} == {
        "gpus": 0, "unit": "mig", "mig_profile": "1g.10gb", "slices": 3, "gpu_share": None,
        "grant": "3 \u00d7 1g.10gb of A100 SXM4 80GB", "approved_grant": None}
    wrong_field = _approve(client, db, fleet, body["id"], gpus=2)
    assert _refusal(wrong_field) == (422, [{
        "field": "gpus", "message": "this request asks for MIG slices: approve slices"}])
    too_many = _approve(client, db, fleet, body["id"], slices=4)
    assert _refusal(too_many) == (422, [{
        "field": "slices", "message": "approve at most 3 \u00d7 1g.10gb: at most what was "
                                      "requested"}])

    approved = _approve(client, db, fleet, body["id"], slices=2, note="two for now")
    assert approved.status_code == 200, approved.text
    item = approved.json()
    assert (item["state"], item["approved_gpus"], item["approved_slices"],
            item["approved_grant"]) == ("approved", 0, 2, "2 \u00d7 1g.10gb of A100 SXM4 80GB")
    assert (item["tenant_quota_gpus"], item["tenant_allocated_gpus"]) == (2, 0)
    [profile] = [p for p in item["capacity"]["mig_profiles"] if p["profile"] == "1g.10gb"]
    assert (profile["guaranteed"], profile["free"]) == (2, 12)

    quota = client.get("/api/v1/tenants/acme/quota",
                       headers=headers(db, fleet.t.acme_admin)).json()["items"]
    assert [(q["display_name"], q["approved_gpus"], q["unit"], q["mig_profile"], q["amount"],
             q["slices"], q["grant"], q["left"]) for q in quota] == [
        ("A100 SXM4 80GB", 0, "mig", "1g.10gb", 2, 2, "2 \u00d7 1g.10gb of A100 SXM4 80GB",
         "2 \u00d7 1g.10gb")]
    change = db.scalars(select(AuditEvent).where(AuditEvent.action == "tenant_quota.change")
                        ).one()
    assert change.after is not None
    assert (change.after["unit"], change.after["mig_profile"], change.after["amount"]) == (
        "mig", "1g.10gb", 2)


def test_a_share_is_asked_approved_and_counted_in_hundredths(client: TestClient,
                                                             db: Session) -> None:
    fleet = units_fleet(db)
    asked = _ask(client, db, fleet, gpu_class_id=fleet.h100.id, gpu_share="0.75")
    assert asked.status_code == 201, asked.text
    body = asked.json()
    assert (body["unit"], body["gpu_share"], body["grant"]) == (
        "share", "0.75", "0.75 of an H100 80GB")
    off_step = _approve(client, db, fleet, body["id"], gpu_share="0.6")
    assert _refusal(off_step)[1][0]["field"] == "gpu_share"
    approved = _approve(client, db, fleet, body["id"], gpu_share="0.5")
    assert approved.status_code == 200, approved.text
    item = approved.json()
    assert (item["approved_gpu_share"], item["approved_grant"]) == ("0.5", "0.5 of an H100 80GB")
    # The share takes one whole GPU out of the free ones, rounded up.
    assert (item["capacity"]["free"], item["capacity"]["shared"]["guaranteed"]) == (15, "0.5")
    row = db.scalars(select(TenantQuota)).one()
    assert (row.unit, row.gpus, row.amount) == ("share", 0, 50)


def test_approvals_of_slices_past_the_free_ones_need_the_overcommit(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    ids = [_ask(client, db, fleet, gpu_class_id=fleet.a100.id, slices=2,
                mig_profile="7g.80gb").json()["id"] for _ in range(2)]
    assert _approve(client, db, fleet, ids[0]).status_code == 200
    refused = _approve(client, db, fleet, ids[1])
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        "approving 2 \u00d7 7g.80gb of A100 SXM4 80GB would guarantee 4 of the 2 ready 7g.80gb "
        "slices (0 free); confirm the overcommit to approve anyway")
    forced = _approve(client, db, fleet, ids[1], overcommit=True)
    assert forced.status_code == 200 and forced.json()["overcommitted"] is True


def test_approvals_of_shares_past_the_free_hundredths_need_the_overcommit(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    whole = _ask(client, db, fleet, gpu_class_id=fleet.h100.id, gpus=15).json()["id"]
    assert _approve(client, db, fleet, whole).status_code == 200
    shares = [_ask(client, db, fleet, gpu_class_id=fleet.h100.id,
                   gpu_share=share).json()["id"] for share in ("0.75", "0.5")]
    assert _approve(client, db, fleet, shares[0]).status_code == 200
    refused = _approve(client, db, fleet, shares[1])
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        "approving 0.5 of an H100 80GB would guarantee more than the shares' room: 0.25 of a GPU "
        "is free for shares; confirm the overcommit to approve anyway")


def test_whole_gpu_requests_of_a_class_with_slices_and_gpus_stay_as_they_were(
        client: TestClient, db: Session) -> None:
    fleet = units_fleet(db)
    asked = _ask(client, db, fleet, gpu_class_id=fleet.h100.id, gpus=4)
    assert asked.status_code == 201
    body = asked.json()
    assert (body["gpus"], body["unit"], body["slices"], body["gpu_share"], body["grant"]) == (
        4, "gpu", None, None, "4 H100 80GB GPUs")
    create = db.scalars(select(AuditEvent).where(AuditEvent.action == "quota_request.create")
                        ).one()
    assert create.after is not None and "slices" not in create.after


def test_an_expiring_approval_of_slices_takes_the_slices_back(client: TestClient,
                                                              db: Session) -> None:
    fleet = units_fleet(db)
    ends_at = (utcnow() + timedelta(days=2)).isoformat()
    asked = _ask(client, db, fleet, gpu_class_id=fleet.a100.id, slices=3,
                 mig_profile="3g.40gb", ends_at=ends_at).json()
    assert _approve(client, db, fleet, asked["id"], slices=2).status_code == 200
    [expired] = expire_quotas(db, utcnow() + timedelta(days=3))
    assert (expired.request_id, expired.gpus) == (asked["id"], 2)
    row = db.scalars(select(TenantQuota)).one()
    assert (row.unit, row.mig_profile, row.amount, row.gpus) == ("mig", "3g.40gb", 0, 0)
    change = db.scalars(select(AuditEvent).where(AuditEvent.action == "tenant_quota.change")
                        .order_by(AuditEvent.id.desc())).first()
    assert change is not None and change.after is not None and change.after["amount"] == 0
