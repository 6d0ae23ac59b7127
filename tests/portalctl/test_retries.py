"""A create whose answer is lost on the way is retried with the same Idempotency-Key."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import func, select

from app.clusters.models import VirtualCluster
from app.portalctl import client as client_module
from app.portalctl.client import ApiError, Client
from tests.portalctl.conftest import Portal


class LosesFirstAnswers(httpx.HTTPTransport):
    """Delivers every request, but drops the answer to the first ``lost`` POSTs."""

    def __init__(self, lost: int) -> None:
        super().__init__()
        self.lost = lost
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST":
            self.keys.append(request.headers.get("idempotency-key"))
            if self.lost:
                self.lost -= 1
                response.close()
                raise httpx.ReadError("connection reset", request=request)
        return response


def test_a_create_whose_answer_was_lost_makes_one_cluster(
    portal: Portal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "RETRY_PAUSE", 0)
    transport = LosesFirstAnswers(lost=2)
    client = Client(portal.url, portal.tokens["acme-admin"], transport=transport)
    body = {"name": "train", "gpu_class_id": portal.h100_id, "gpus": 2}
    created = client.request("POST", "/api/v1/tenants/acme/clusters", json=body, create=True)
    assert created["name"] == "train"
    assert len(transport.keys) == 3 and len(set(transport.keys)) == 1
    with portal.database.session() as db:
        assert db.scalar(select(func.count()).select_from(VirtualCluster)) == 1


def test_an_answer_lost_every_time_is_an_error(
    portal: Portal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "RETRY_PAUSE", 0)
    client = Client(portal.url, portal.tokens["acme-admin"], transport=LosesFirstAnswers(9))
    with pytest.raises(ApiError, match="cannot reach the portal") as raised:
        client.request("POST", "/api/v1/tenants/acme/clusters",
                       json={"name": "train", "gpus": 0}, create=True)
    assert raised.value.exit_code == 1
    with portal.database.session() as db:
        assert db.scalar(select(func.count()).select_from(VirtualCluster)) == 1
