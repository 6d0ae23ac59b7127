"""Ids beyond what a row can have are refused as input errors, never a database overflow."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests import factories
from tests.support.principals import bearer

HUGE = 29478626546269165264148889600


@pytest.mark.parametrize(("method", "path"), [
    ("POST", f"/api/v1/quota-requests/{HUGE}/reject"),
    ("POST", f"/api/v1/quota-requests/{HUGE}/approve"),
    ("DELETE", f"/api/v1/tokens/{HUGE}"),
    ("PATCH", f"/api/v1/gpu-classes/{HUGE}"),
])
def test_an_absurd_id_in_a_path_is_a_422(
    client: TestClient, db: Session, method: str, path: str
) -> None:
    admin = factories.user(db, admin=True)
    response = client.request(method, path, json={}, headers=bearer(db, admin))
    assert response.status_code == 422


def test_an_absurd_id_in_a_body_is_a_422(client: TestClient, db: Session) -> None:
    admin = factories.user(db, admin=True)
    factories.tenant(db, "acme")
    response = client.post("/api/v1/tenants/acme/quota-requests", headers=bearer(db, admin),
                           json={"gpu_class_id": HUGE, "gpus": 1, "reason": "x"})
    assert response.status_code == 422
    assert "gpu_class_id" in [e["field"] for e in response.json()["errors"]]


@pytest.mark.parametrize("last_id", [str(HUGE), str(-HUGE)])
def test_an_absurd_id_in_a_cursor_is_a_422(client: TestClient, db: Session, last_id: str) -> None:
    import base64

    user = factories.user(db)
    cursor = base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")
    response = client.get("/api/v1/tokens", params={"cursor": cursor},
                          headers=bearer(db, user))
    assert response.status_code == 422
    assert "cursor" in [e["field"] for e in response.json()["errors"]]


def test_a_denial_on_a_very_long_path_is_still_a_404(client: TestClient, db: Session) -> None:
    user = factories.user(db)
    response = client.get(f"/api/v1/tenants/{'a' * 400}/clusters", headers=bearer(db, user))
    assert response.status_code == 404
