"""Issue 29, items 5 and 6: a tenant is guided (quota left per class, warnings on requests
beyond the fleet, whom to ask, only the token scopes a user can hold) and bad input comes back
inside the form, in the portal's words."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.auth.sessions import PLAIN_COOKIE
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from tests import factories
from tests.authz.route_access import ROUTES
from tests.authz.world import World
from tests.clusters.test_end_to_end import sign_in_acme_admin
from tests.support import oidc
from tests.support.kube import InMemoryConnector
from tests.support.tenancy import build_tenancy, headers
from tests.support.web import HTML, csrf_of, htmx

PYDANTIC_WORDING = re.compile(r"Input should|String should|List should|Field required|"
                              r"valid integer|greater than or equal|less than or equal")


def _error_of(page: str, field: str) -> str:
    found = re.search(rf'id="{field}-error"[^>]*>([^<]*)<', page)
    assert found, f"no error slot for {field}"
    return found.group(1)


def _pending_user(db: Session, email: str) -> User:
    """A user added by email who has not signed in yet: the first sign-in claims it."""
    user = User(email=email, name="")
    db.add(user)
    db.flush()
    return user


def _sign_in_member(client: TestClient, db: Session, oidc_issuer: str, slug: str = "acme",
                    role: str = "member") -> None:
    tenant = factories.tenant(db, slug, display_name="Acme Research")
    admin = User(email=f"ada@{slug}.example", name="Ada Admin")
    db.add(admin)
    db.flush()
    factories.membership(db, tenant, admin, "admin")
    member = _pending_user(db, f"bob@{slug}.example")
    factories.membership(db, tenant, member, role)
    db.commit()
    oidc.register_user(oidc_issuer, member.email, name="Bob Member")
    oidc.sign_in(client, member.email)


# ----- item 5: the create form shows what is left per class, and only classes with quota


def test_the_create_form_offers_only_classes_with_quota_and_what_is_left(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S")  # no quota of it
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    made = client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf},
                       follow_redirects=False,
                       data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "3"})
    assert made.status_code == 303, made.text
    page = client.get("/t/acme/clusters", headers=HTML).text
    assert "H100 80GB (NVIDIA-H100-80GB-HBM3): 5 of 8 GPUs left" in page
    assert "L40S" not in page


def test_without_quota_the_create_form_says_how_to_get_some(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    tenant = factories.tenant(db, "newco", display_name="Newco")
    factories.gpu_class(db, display_name="H100 80GB")
    user = _pending_user(db, "nia@newco.example")
    factories.membership(db, tenant, user, "admin")
    db.commit()
    oidc.register_user(oidc_issuer, user.email)
    oidc.sign_in(client, user.email)
    page = client.get("/t/newco/clusters", headers=HTML).text
    assert "H100 80GB" not in page
    assert "no GPU quota yet" in page
    assert 'href="/t/newco/quota-requests/new"' in page


# ----- item 5: a request beyond the fleet is sent, with a warning


def test_a_request_for_more_than_the_fleet_has_goes_through_with_a_warning(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)  # 64 H100s
    asked = client.post("/api/v1/tenants/acme/quota-requests", headers=headers(db, t.acme_admin),
                        json={"gpu_class_id": t.h100.id, "gpus": 1000, "reason": "big run"})
    assert asked.status_code == 201, asked.text
    [warning] = asked.json()["warnings"]
    assert "more than the whole fleet has" in warning
    assert "64" not in warning  # tenants are not shown the fleet's figures
    modest = client.post("/api/v1/tenants/acme/quota-requests",
                         headers=headers(db, t.acme_admin),
                         json={"gpu_class_id": t.h100.id, "gpus": 64, "reason": "all of it"})
    assert modest.json()["warnings"] == []

    queue = client.get("/api/v1/quota-requests", headers=headers(db, t.platform_admin)).json()
    by_id = {item["id"]: item["warnings"] for item in queue["items"]}
    assert by_id[modest.json()["id"]] == []
    assert by_id[asked.json()["id"]] == [
        "asks for 1000 H100 80GB GPUs while the fleet has 64: approving all of it "
        "would need an overcommit"]
    page = client.get("/admin/quota-requests", headers={**HTML, **headers(db, t.platform_admin)})
    assert "while the fleet has 64" in page.text


def test_the_request_form_warns_while_it_is_filled_in(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)  # a class with no nodes at all
    csrf = csrf_of(client.get("/t/acme/quota-requests/new", headers=HTML).text)
    checked = client.post("/t/acme/quota-requests/validate",
                          headers={**htmx(csrf), "HX-Trigger-Name": "gpus"},
                          data={"gpu_class_id": str(gpu_id), "gpus": "1000"})
    assert checked.status_code == 200
    warning = re.search(r'id="gpus-warning"[^>]*>([^<]*)<', checked.text)
    assert warning and "more than the whole fleet has" in warning.group(1)
    sent = client.post("/t/acme/quota-requests", headers=htmx(csrf),
                       data={"gpu_class_id": str(gpu_id), "gpus": "1000", "reason": "big run"})
    assert sent.status_code == 200 and sent.headers["HX-Redirect"] == "/t/acme"
    assert "more than the whole fleet has" in sent.headers["HX-Trigger"]


# ----- item 5: a member learns whom to ask; nobody else learns who the admins are


def test_a_member_sees_the_tenants_admins_instead_of_the_create_form(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    _sign_in_member(client, db, oidc_issuer)
    page = client.get("/t/acme/clusters", headers=HTML).text
    assert 'id="cluster-form"' not in page
    hint = re.search(r'id="who-to-ask">(.*?)</p>', page, re.S)
    assert hint is not None
    assert "Ada Admin" in hint.group(1) and "ada@acme.example" in hint.group(1)
    assert "make you an admin" in hint.group(1)
    assert "ada@acme.example" in client.get("/t/acme", headers=HTML).text


def test_a_refusal_by_role_says_who_can_help_in_the_page_and_the_problem(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    member = headers(db, t.acme_member)
    refused = client.post("/api/v1/tenants/acme/quota-requests", headers=member,
                          json={"gpu_class_id": t.h100.id, "gpus": 1, "reason": "x"})
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "your role 'member' in 'acme' may not manage here; ask an admin of 'acme' "
        f"({t.acme_admin.name} <acme-admin@example.com>) to do it for you, or to make you an "
        "admin")
    page = client.get("/t/acme/quota-requests/new", headers={**HTML, **member})
    assert page.status_code == 403 and "acme-admin@example.com" in page.text


def test_nobody_outside_the_tenant_learns_who_its_admins_are(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    outsider = headers(db, t.globex_admin)
    for response in (
        client.post("/api/v1/tenants/acme/quota-requests", headers=outsider,
                    json={"gpu_class_id": t.h100.id, "gpus": 1, "reason": "x"}),
        client.get("/t/acme/clusters", headers={**HTML, **outsider}),
        client.get("/t/acme/quota-requests/new", headers={**HTML, **outsider}),
    ):
        assert response.status_code == 404
        assert "acme-admin@example.com" not in response.text


# ----- item 5: only the scopes a user can hold


def test_a_token_scope_the_user_cannot_hold_is_a_422(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    refused = client.post("/api/v1/tokens", headers=headers(db, t.acme_member),
                          json={"name": "ci", "scopes": ["read", "admin"]})
    assert refused.status_code == 422
    assert refused.json()["errors"] == [{
        "field": "scopes", "message": "admin: only platform admins can hold that scope; your "
                                      "tokens can have read and write"}]
    allowed = client.post("/api/v1/tokens", headers=headers(db, t.platform_admin),
                          json={"name": "ci", "scopes": ["admin"]})
    assert allowed.status_code == 201, allowed.text


def test_the_tokens_page_offers_only_the_scopes_the_user_can_hold(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    member_page = client.get("/tokens", headers={**HTML, **headers(db, t.acme_member)}).text
    admin_page = client.get("/tokens", headers={**HTML, **headers(db, t.platform_admin)}).text
    offered = re.compile(r'name="scopes" value="(\w+)"')
    assert offered.findall(member_page) == ["read", "write"]
    assert offered.findall(admin_page) == ["read", "write", "admin"]


# ----- item 6: bad input comes back inside the form


def test_a_nul_in_a_cluster_name_comes_back_inside_the_form(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    for extra in ({"HX-Request": "true"}, HTML):
        answer = client.post("/t/acme/clusters", headers={**extra, "X-CSRF-Token": csrf},
                             data={"name": "in\x00fer", "gpu_class_id": str(gpu_id),
                                   "gpus": "3", "memory_mib": "2048"})
        assert answer.status_code == 422
        assert answer.headers["content-type"].startswith("text/html")
        assert 'id="cluster-form"' in answer.text
        assert _error_of(answer.text, "name").startswith("holds a control character; a DNS-1123")
        assert 'name="memory_mib" min="0" step="1" value="2048"' in answer.text
    assert db.scalar(select(func.count()).select_from(VirtualCluster)) == 0


def test_a_nul_sent_by_a_script_is_still_a_problem_document(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    answer = client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf},
                         data={"name": "in\x00fer"})
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"


def test_a_name_over_40_characters_is_refused_not_cut(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    sign_in_acme_admin(db, oidc_issuer, client)
    page = client.get("/t/acme/clusters", headers=HTML).text
    assert not re.search(r'<input[^>]*name="name"[^>]*maxlength', page)
    long_name = "a" * 45
    answer = client.post("/t/acme/clusters", headers=htmx(csrf_of(page)),
                         data={"name": long_name, "gpus": "0"})
    assert answer.status_code == 422
    assert _error_of(answer.text, "name") == "at most 40 characters (this one has 45)"
    assert f'value="{long_name}"' in answer.text
    assert db.scalar(select(func.count()).select_from(VirtualCluster)) == 0


def test_long_names_in_the_clusters_table_are_cut_visibly_with_the_whole_name_in_a_title(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    name = "a-rather-long-cluster-name-of-forty-char"
    client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf}, data={"name": name})
    page = client.get("/t/acme/clusters", headers=HTML).text
    assert f'class="name-cell" href="/t/acme/clusters/{name}" title="{name}"' in page


def test_huge_and_odd_numbers_are_told_in_the_portals_words(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    cases = {"1e30": "a whole number, such as 4", "9" * 31: "far too large a number",
             "-1": "at least 0", "10001": "at most 10000"}
    for typed, said in cases.items():
        cluster = client.post("/t/acme/clusters", headers=htmx(csrf),
                              data={"name": "train", "gpu_class_id": str(gpu_id),
                                    "gpus": typed})
        assert _error_of(cluster.text, "gpus") == said, typed
        request = client.post("/t/acme/quota-requests", headers=htmx(csrf),
                              data={"gpu_class_id": str(gpu_id), "gpus": typed,
                                    "reason": "x"})
        if typed != "-1":
            assert _error_of(request.text, "gpus") == said, typed
    empty = client.post("/t/acme/quota-requests", headers=htmx(csrf), data={"gpus": "2"})
    assert _error_of(empty.text, "reason") == "required"
    token = client.post("/tokens", headers={**HTML, "X-CSRF-Token": csrf},
                        data={"name": "ci", "scopes": "read", "expires_in_days": "1e30"})
    assert token.status_code == 422
    assert "a whole number, such as 4" in token.text
    assert not PYDANTIC_WORDING.search(token.text)


WEB_WRITES = [r for r in ROUTES if r.method == "POST" and not r.path.startswith("/api/")
              and r.body is not None]
ODD_VALUES = ("1e30", "9" * 31, "-1", "", "x" * 300)


@pytest.fixture
def kube_client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database, kube=InMemoryConnector()),
                    raise_server_exceptions=False) as test_client:
        yield test_client


def test_no_form_answers_in_pydantics_words(kube_client: TestClient, world: World) -> None:
    """Every field of every form, given odd values: whatever the answer, no "Input should"."""
    client = kube_client
    caller = world.callers["platform_admin"]
    client.cookies.set(PLAIN_COOKIE, caller.cookie or "")
    for route in WEB_WRITES:
        url = route.path.format(**route.params(world))
        assert route.body is not None
        for field in route.body(world):
            for odd in ODD_VALUES:
                answer = client.post(url, headers={**HTML, "x-csrf-token": caller.csrf},
                                     data={**route.body(world), field: odd})
                where = f"POST {url} {field}={odd[:12]!r}"
                assert answer.status_code < 500, where
                assert not PYDANTIC_WORDING.search(answer.text), (
                    f"{where}: {PYDANTIC_WORDING.findall(answer.text)}")
