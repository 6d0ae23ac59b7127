"""Bad input is a 422 with a field-level message and writes nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.database.core import utcnow
from app.quotas.models import QuotaRequest, TenantQuota
from tests.support.tenancy import build_tenancy, headers

GOOD: dict[str, Any] = {"gpus": 4, "reason": "training"}


def _count(db: Session, model: type[Any]) -> int:
    return int(db.scalar(select(func.count()).select_from(model)) or 0)


@pytest.mark.parametrize(("change", "field"), [
    ({"gpus": -1}, "gpus"),
    ({"gpus": 0}, "gpus"),
    ({"gpus": 1.5}, "gpus"),
    ({"gpus": "3"}, "gpus"),
    ({"gpus": True}, "gpus"),
    ({"gpus": 10_001}, "gpus"),
    ({"gpus": 10**30}, "gpus"),
    ({"cpu_millicores": -5}, "cpu_millicores"),
    ({"memory_mib": 2**40}, "memory_mib"),
    ({"reason": ""}, "reason"),
    ({"reason": "x" * 2001}, "reason"),
    ({"reason": "bell\x07"}, "reason"),
    ({"reason": "nul\x00"}, "reason"),
    ({"ends_at": (utcnow() - timedelta(days=1)).isoformat()}, "ends_at"),
    ({"ends_at": "2030-01-01T00:00:00"}, "ends_at"),
    ({"ends_at": (utcnow() + timedelta(days=3700)).isoformat()}, "ends_at"),
    ({"gpu_class_id": 987654}, "gpu_class_id"),
    ({"gpu_class_id": "1"}, "gpu_class_id"),
    ({"surprise": 1}, "surprise"),
])
def test_bad_quota_requests_are_refused_field_by_field(
    client: TestClient, db: Session, change: dict[str, Any], field: str
) -> None:
    t = build_tenancy(db)
    auth = headers(db, t.acme_admin)
    before = (_count(db, QuotaRequest), _count(db, AuditEvent))
    response = client.post("/api/v1/tenants/acme/quota-requests", headers=auth,
                           json={"gpu_class_id": t.h100.id, **GOOD, **change})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert field in [e["field"] for e in response.json()["errors"]]
    assert (_count(db, QuotaRequest), _count(db, AuditEvent)) == before


def test_multi_line_reasons_are_fine(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    response = client.post("/api/v1/tenants/acme/quota-requests", headers=headers(
        db, t.acme_admin), json={"gpu_class_id": t.h100.id, "gpus": 2,
                                 "reason": "line one\nline two",
                                 "ends_at": (utcnow() + timedelta(days=30)).isoformat()})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(("body", "field"), [
    ({"gpus": 0}, "gpus"),
    ({"gpus": 9}, "gpus"),
    ({"gpus": 2.0}, "gpus"),
    ({"overcommit": "yes"}, "overcommit"),
    ({"note": "\x1b[31m"}, "note"),
])
def test_bad_approvals_are_refused_and_leave_the_request_pending(
    client: TestClient, db: Session, body: dict[str, Any], field: str
) -> None:
    t = build_tenancy(db)
    request = QuotaRequest(tenant_id=t.acme.id, gpu_class_id=t.h100.id, gpus=8, reason="x")
    db.add(request)
    db.flush()
    response = client.post(f"/api/v1/quota-requests/{request.id}/approve",
                           headers=headers(db, t.platform_admin), json=body)
    assert response.status_code == 422, response.text
    assert field in [e["field"] for e in response.json()["errors"]]
    db.expire_all()
    assert db.get(QuotaRequest, request.id).state == "pending"  # type: ignore[union-attr]
    assert _count(db, TenantQuota) == 0
