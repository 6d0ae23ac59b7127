"""Per-tenant and per-user limits (issue 53, item 2): enforced by each domain's service with a
409 naming the limit and the count, shown on the tenant's dashboard and in the API."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.auth import token_service
from app.clusters import service as clusters
from app.clusters.schemas import ClusterCreate
from app.database.core import Database
from app.kit.config import Settings
from app.kit.limits import LimitReached
from app.process.asgi import create_app
from app.quotas import service as quotas
from app.quotas.schemas import QuotaRequestCreate
from tests.support import oidc
from tests.support.principals import bearer
from tests.support.tenancy import Tenancy, build_tenancy, signed_in_admin_of
from tests.support.waiting import wait_for
from tests.support.web import csrf_of

LIMITS = {"tenant_max_pending_quota_requests": 2, "tenant_max_clusters": 2,
          "user_max_live_tokens": 3, "token_max_lifetime_days": 30}
REQUESTS = "/api/v1/tenants/acme/quota-requests"
CLUSTERS = "/api/v1/tenants/acme/clusters"


@pytest.fixture
def tenancy(db: Session) -> Tenancy:
    tenancy = build_tenancy(db)
    db.commit()
    return tenancy


@pytest.fixture
def limited(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings.model_copy(update=LIMITS), database)) as client:
        yield client


def _request(tenancy: Tenancy) -> dict[str, Any]:
    return {"gpu_class_id": tenancy.h100.id, "gpus": 10_000, "reason": "training"}


def _cluster(name: str, **overrides: Any) -> dict[str, Any]:
    return {"name": name, "placement": "shared-pool", "gpus": 0, "cpu_millicores": 1000,
            "memory_mib": 1024, **overrides}


def _refused_by_limit(answer: Any, key: str, maximum: int, current: int) -> None:
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert (problem["limit"], problem["maximum"], problem["current"]) == (key, maximum, current)
    assert f"has {current} " in problem["detail"] and f"is {maximum}" in problem["detail"]


def test_pending_quota_requests_are_bounded_per_tenant(
    limited: TestClient, db: Session, tenancy: Tenancy
) -> None:
    admin = bearer(db, tenancy.acme_admin)
    created = [limited.post(REQUESTS, json=_request(tenancy), headers=admin) for _ in range(2)]
    assert [answer.status_code for answer in created] == [201, 201]
    _refused_by_limit(limited.post(REQUESTS, json=_request(tenancy), headers=admin),
                      "pending_quota_requests", 2, 2)
    # Another tenant is not held back by acme's requests.
    globex = limited.post("/api/v1/tenants/globex/quota-requests", json=_request(tenancy),
                          headers=bearer(db, tenancy.globex_admin))
    assert globex.status_code == 201
    cancelled = limited.post(f"{REQUESTS}/{created[0].json()['id']}/cancel", headers=admin)
    assert cancelled.status_code == 200
    assert limited.post(REQUESTS, json=_request(tenancy), headers=admin).status_code == 201


def test_clusters_are_bounded_per_tenant(limited: TestClient, db: Session,
                                         tenancy: Tenancy) -> None:
    admin = bearer(db, tenancy.acme_admin)
    for name in ("one", "two"):
        answer = limited.post(CLUSTERS, json=_cluster(name), headers=admin)
        assert answer.status_code == 201, answer.text
    _refused_by_limit(limited.post(CLUSTERS, json=_cluster("three"), headers=admin),
                      "clusters", 2, 2)
    assert limited.delete(f"{CLUSTERS}/one", headers=admin).status_code == 202
    # Still running until the worker has removed it from its host: it still counts.
    _refused_by_limit(limited.post(CLUSTERS, json=_cluster("three"), headers=admin),
                      "clusters", 2, 2)


def test_a_cluster_with_no_resources_at_all_is_refused(limited: TestClient, db: Session,
                                                       tenancy: Tenancy) -> None:
    admin = bearer(db, tenancy.acme_admin)
    empty = limited.post(CLUSTERS, json=_cluster("empty", cpu_millicores=0, memory_mib=0),
                         headers=admin)
    assert empty.status_code == 422, empty.text
    assert {e["field"] for e in empty.json()["errors"]} == {"gpus", "cpu_millicores",
                                                           "memory_mib"}
    assert limited.post(CLUSTERS, json=_cluster("small"), headers=admin).status_code == 201
    emptied = limited.patch(f"{CLUSTERS}/small", json={"cpu_millicores": 0, "memory_mib": 0},
                            headers=admin)
    assert emptied.status_code == 422, emptied.text
    assert limited.patch(f"{CLUSTERS}/small", json={"memory_mib": 0},
                         headers=admin).status_code == 200


def test_live_tokens_are_bounded_per_user_and_their_lifetime(
    limited: TestClient, db: Session, tenancy: Tenancy
) -> None:
    member = bearer(db, tenancy.acme_member)  # the first of the member's 3
    made = [limited.post("/api/v1/tokens", json={"name": f"ci-{n}", "scopes": ["read"]},
                         headers=member) for n in range(2)]
    assert [answer.status_code for answer in made] == [201, 201]
    _refused_by_limit(limited.post("/api/v1/tokens", json={"name": "ci", "scopes": ["read"]},
                                   headers=member), "live_tokens", 3, 3)
    assert limited.delete(f"/api/v1/tokens/{made[0].json()['id']}",
                          headers=member).status_code == 204
    too_long = limited.post("/api/v1/tokens", headers=member, json={
        "name": "ci", "scopes": ["read"], "expires_in_days": 365})
    assert too_long.status_code == 422
    assert too_long.json()["errors"][0]["field"] == "expires_in_days"
    assert "at most 30 days" in too_long.text
    assert limited.post("/api/v1/tokens", headers=member, json={
        "name": "ci", "scopes": ["read"], "expires_in_days": 30}).status_code == 201


def test_the_limits_and_counts_are_in_the_api_and_on_the_dashboard(
    limited: TestClient, db: Session, tenancy: Tenancy
) -> None:
    admin = bearer(db, tenancy.acme_admin)
    assert limited.post(REQUESTS, json=_request(tenancy), headers=admin).status_code == 201
    assert limited.post(CLUSTERS, json=_cluster("one"), headers=admin).status_code == 201
    viewer = bearer(db, tenancy.acme_viewer)
    answer = limited.get("/api/v1/tenants/acme/limits", headers=viewer)
    assert answer.status_code == 200
    figures = {limit["key"]: (limit["per"], limit["current"], limit["maximum"])
               for limit in answer.json()["limits"]}
    assert figures == {"pending_quota_requests": ("tenant", 1, 2), "clusters": ("tenant", 1, 2),
                       "live_tokens": ("user", 1, 3), "token_lifetime_days": ("user", None, 30)}
    hidden = limited.get("/api/v1/tenants/acme/limits", headers=bearer(db, tenancy.globex_admin))
    assert hidden.status_code == 404
    page = limited.get("/t/acme", headers={**viewer, "accept": "text/html"})
    assert page.status_code == 200
    row = page.text.split('data-limit="clusters"')[1].split("</tr>")[0]
    assert '<td class="current">1</td>' in row and '<td class="maximum">2</td>' in row


def _waiting_on_a_lock(database: Database) -> bool:
    with database.engine.connect() as connection:
        return bool(connection.scalar(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'")))


Create = Callable[[Session, Tenancy, Settings, str], object]


def _quota_request(db: Session, t: Tenancy, settings: Settings, name: str) -> object:
    return quotas.create_request(db, t.principal(t.acme_admin), settings, "acme",
                                 QuotaRequestCreate(gpu_class_id=t.h100.id, gpus=4,
                                                    reason=name))


def _a_cluster(db: Session, t: Tenancy, settings: Settings, name: str) -> object:
    return clusters.create_cluster(db, t.principal(t.acme_admin), settings, "acme",
                                   ClusterCreate.model_validate(_cluster(name)))


def _a_token(db: Session, t: Tenancy, settings: Settings, name: str) -> object:
    return token_service.create_token(db, t.principal(t.acme_admin), settings, name=name,
                                      scopes=["read"], expires_in_days=7)


@pytest.mark.parametrize("create", [_quota_request, _a_cluster, _a_token],
                         ids=["quota request", "cluster", "token"])
def test_two_creates_at_once_cannot_both_take_the_last_place(
    own_pg_database: Database, create: Create
) -> None:
    """The first holds its transaction open after its insert; the second, counting meanwhile,
    must wait for it (the owner's row lock) and then see the place taken."""
    database = own_pg_database
    settings = Settings(env="test").model_copy(update={
        "tenant_max_pending_quota_requests": 1, "tenant_max_clusters": 1,
        "user_max_live_tokens": 1})
    with database.transaction() as db:
        tenancy = build_tenancy(db)
    outcome: list[str] = []

    def second() -> None:
        try:
            with database.transaction() as db:
                create(db, tenancy, settings, "second")
            outcome.append("created")
        except LimitReached:
            outcome.append("refused")

    with database.transaction() as first:
        create(first, tenancy, settings, "first")
        racer = threading.Thread(target=second)
        racer.start()
        wait_for(lambda: bool(outcome) or _waiting_on_a_lock(database),
                 "the second to finish or wait on the first's lock", timeout=5)
    racer.join(timeout=30)
    assert outcome == ["refused"]


def test_the_pages_say_which_limit_was_reached(limited: TestClient, db: Session,
                                                tenancy: Tenancy, oidc_issuer: str) -> None:
    """The tokens page and the quota request form, as a signed-in browser uses them."""
    oidc.sign_in(limited, "bob@example.com")
    csrf = csrf_of(limited.get("/tokens", headers={"accept": "text/html"}).text)
    answers = [limited.post("/tokens", data={"csrf_token": csrf, "name": f"laptop-{n}",
                                             "scopes": ["read"], "expires_in_days": "7"})
               for n in range(4)]
    assert [answer.status_code for answer in answers] == [200, 200, 200, 409]
    assert "has 3 live API tokens, the limit (PORTAL_USER_MAX_LIVE_TOKENS) is 3" in answers[3].text
    assert "(days, 1\u201330)" in answers[3].text
    admin = bearer(db, tenancy.acme_admin)
    for _ in range(2):
        assert limited.post(REQUESTS, json=_request(tenancy), headers=admin).status_code == 201
    signed_in_admin_of(limited, db, oidc_issuer, tenancy.acme)
    form = limited.get("/t/acme/quota-requests/new", headers={"accept": "text/html"})
    sent = limited.post("/t/acme/quota-requests", data={
        "csrf_token": csrf_of(form.text), "gpu_class_id": str(tenancy.h100.id), "gpus": "4",
        "reason": "training"}, headers={"accept": "text/html"})
    assert sent.status_code == 409
    assert "has 2 pending quota requests" in sent.text


@pytest.mark.parametrize("create", [_quota_request, _a_cluster],
                         ids=["quota request", "cluster"])
def test_a_create_holding_its_tenant_holds_back_no_insert_naming_the_tenant(
    own_pg_database: Database, create: Create
) -> None:
    """The worker's usage rows, another request's audit rows: their foreign key checks lock
    the tenant's row ``FOR KEY SHARE``, which the limit's ``FOR NO KEY UPDATE`` lets through
    (``FOR UPDATE`` held them until the create committed, and could deadlock with an approval
    that holds a quota row the create then waits for)."""
    database = own_pg_database
    with database.transaction() as db:
        tenancy = build_tenancy(db)
    with database.transaction() as first:
        create(first, tenancy, Settings(env="test"), "first")
        with database.engine.connect() as other:
            other.execute(text("SET lock_timeout = '2s'"))
            other.execute(text(
                "INSERT INTO usage_ledger (at, at_s, kind, subject_id, tenant_id, gpu_class_id,"
                " cluster_name, gpus, amount) VALUES (now(), 0, 'quota', 1, :tenant, :gpu, '', 1,"
                " 1)"),
                {"tenant": tenancy.acme.id, "gpu": tenancy.h100.id})
            other.rollback()
