"""The hosts API and pages: platform admins only, 422 naming the field, and the credentials
never come back: every response of the API and the pages, the audit trail and the logs are
scanned for the secret after registering and replacing it."""

from __future__ import annotations

import base64
import logging

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.hosts.models import HostCluster
from app.lab.pki import CertificateAuthority, KeyPair
from app.process.devmode import DEMO_ADMIN
from tests import factories
from tests.support import oidc
from tests.support.kube_server import kubeconfig_yaml
from tests.support.principals import bearer
from tests.support.web import csrf_of

SECRET = "s3cr3t-sa-token-never-shown"
SECOND_SECRET = "an0ther-s3cr3t-token"
CA = CertificateAuthority()
API = "/api/v1/host-clusters"


def kubeconfig(token: str = SECRET) -> str:
    return kubeconfig_yaml("https://gpu-eu-2.example.com:6443", CA.cert_pem, token=token)


def register_body(name: str = "gpu-eu-2") -> dict[str, object]:
    return {"name": name, "region": "eu-west", "description": "second site",
            "credentials": {"kind": "kubeconfig", "kubeconfig": kubeconfig()}}


def test_the_api_round_trip_never_returns_or_logs_the_credentials(
        client: TestClient, db: Session, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    auth = bearer(db, factories.user(db, admin=True))
    db.commit()
    seen: list[str] = []

    def call(method: str, path: str, **kwargs: object) -> dict[str, object]:
        response = client.request(method, path, headers=auth, **kwargs)  # type: ignore[arg-type]
        seen.append(response.text)
        assert response.status_code < 400, response.text
        return response.json() if response.content else {}

    created = call("POST", API, json=register_body())
    assert created["credentials"] == {"kind": "kubeconfig",
                                      "server": "https://gpu-eu-2.example.com:6443",
                                      "set_at": created["credentials"]["set_at"]}  # type: ignore[index]
    call("GET", API)
    call("GET", f"{API}/gpu-eu-2")
    call("PATCH", f"{API}/gpu-eu-2", json={"kube_qps": 40, "description": "hall 2"})
    replaced = call("PUT", f"{API}/gpu-eu-2/credentials", json={
        "kind": "token", "server": "https://gpu-eu-2.example.com", "token": SECOND_SECRET,
        "ca_certificate": CA.cert_pem.decode()})
    assert replaced["credentials"]["kind"] == "token"  # type: ignore[index]
    for action in ("cordon", "drain", "uncordon"):
        call("POST", f"{API}/gpu-eu-2/{action}", json={"reason": "maintenance"})
    assert call("POST", f"{API}/gpu-eu-2/cordon")["state"] == "cordoned"  # no body: no reason
    call("POST", f"{API}/gpu-eu-2/check")
    call("GET", "/api/v1/audit", params={"limit": 100})
    call("GET", "/openapi.json")
    call("DELETE", f"{API}/gpu-eu-2")
    for text in [*seen, caplog.text]:
        assert SECRET not in text and SECOND_SECRET not in text


def test_bad_input_is_a_422_naming_the_field_without_echoing_the_secret(
        client: TestClient, db: Session) -> None:
    auth = bearer(db, factories.user(db, admin=True))
    db.commit()
    body = register_body()
    body["credentials"] = {"kind": "kubeconfig",
                           "kubeconfig": kubeconfig().replace("https://", "http://")}
    response = client.post(API, json=body, headers=auth)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "credentials.kubeconfig (cluster server)"
    assert SECRET not in response.text
    bad_name = client.post(API, json={**register_body("Not_A_Label")}, headers=auth)
    assert bad_name.status_code == 422 and bad_name.json()["errors"][0]["field"] == "name"
    wrong_type = client.post(API, json={**register_body(), "credentials": {
        "kind": "token", "token": 12345}}, headers=auth)
    assert wrong_type.status_code == 422
    assert wrong_type.json()["errors"][0]["field"] == "credentials.token"
    missing = client.post(API, json={**register_body(), "credentials": {
        "kind": "token", "server": "https://x.example.com", "token": SECRET}}, headers=auth)
    assert missing.status_code == 422
    assert missing.json()["errors"][0]["field"] == "credentials.ca_certificate"
    assert SECRET not in missing.text


def test_only_platform_admins_reach_the_hosts_api(client: TestClient, db: Session) -> None:
    member = bearer(db, factories.user(db))
    read_only_admin = bearer(db, factories.user(db, admin=True), "read")
    db.commit()
    assert client.get(API, headers=member).status_code == 403
    assert client.post(API, json=register_body(), headers=member).status_code == 403
    assert client.post(API, json=register_body(), headers=read_only_admin).status_code == 403


def test_deleting_a_host_that_nodes_point_at_is_a_409(client: TestClient, db: Session) -> None:
    auth = bearer(db, factories.user(db, admin=True))
    db.commit()
    assert client.post(API, json=register_body(), headers=auth).status_code == 201
    host = db.query(HostCluster).filter_by(name="gpu-eu-2").one()
    factories.node(db, host, None, "gpu-node-1")
    db.commit()
    response = client.delete(f"{API}/gpu-eu-2", headers=auth)
    assert response.status_code == 409 and "1 nodes" in response.json()["detail"]


def test_the_pages_register_replace_and_cordon_without_showing_the_secret(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    oidc.sign_in(client, DEMO_ADMIN)
    listing = client.get("/admin/hosts")
    assert listing.status_code == 200
    csrf = csrf_of(listing.text)
    pages = [listing.text]
    refused = client.post("/admin/hosts", data={
        "csrf_token": csrf, "name": "gpu-eu-2", "kind": "kubeconfig",
        "kubeconfig": kubeconfig().replace("https://", "http://")})
    assert refused.status_code == 422 and "https:// URL" in refused.text
    pages.append(refused.text)
    created = client.post("/admin/hosts", data={
        "csrf_token": csrf, "name": "gpu-eu-2", "region": "eu-west", "kube_qps": "",
        "kind": "kubeconfig", "kubeconfig": kubeconfig()})
    assert created.status_code == 200, created.text  # followed to the host's page
    pages.append(created.text)
    assert "gpu-eu-2.example.com:6443" in created.text
    replaced = client.post("/admin/hosts/gpu-eu-2/credentials", data={
        "csrf_token": csrf, "kind": "token", "server": "https://gpu-eu-2.example.com",
        "token": SECOND_SECRET, "ca_certificate": "not a certificate"})
    assert replaced.status_code == 422 and "PEM" in replaced.text
    pages.append(replaced.text)
    cordoned = client.post("/admin/hosts/gpu-eu-2/state/cordon", data={"csrf_token": csrf})
    assert cordoned.status_code == 200 and "takes no new clusters" in cordoned.text
    pages += [cordoned.text, client.get("/admin/hosts").text, client.get("/audit").text]
    for page in pages:
        assert SECRET not in page and SECOND_SECRET not in page
    no_csrf = client.post("/admin/hosts/gpu-eu-2/state/uncordon", data={})
    assert no_csrf.status_code in (400, 403)


def test_an_admin_sets_and_removes_a_hosts_webhook_url(client: TestClient, db: Session) -> None:
    """The API takes an https:// address the host's API server can call, shows where it
    calls (the path names the host), audits the change, and refuses what it could not call."""
    auth = bearer(db, factories.user(db, admin=True))
    db.commit()
    refused = client.post(API, json={**register_body(),
                                     "webhook_url": "http://hook.example:9443"}, headers=auth)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "webhook_url"
    assert "https://" in refused.json()["errors"][0]["message"]
    created = client.post(API, json=register_body(), headers=auth).json()
    assert (created["webhook_url"], created["webhook_endpoint"]) == (None, "")
    updated = client.patch(f"{API}/gpu-eu-2", json={
        "webhook_url": "https://webhook.gpu-eu-2.example.com:9443"}, headers=auth).json()
    assert updated["webhook_endpoint"] == (
        f"https://webhook.gpu-eu-2.example.com:9443/mutate-pods/hosts/{created['id']}")
    kept = client.patch(f"{API}/gpu-eu-2", json={"description": "hall 3"}, headers=auth)
    assert kept.json()["webhook_url"] == "https://webhook.gpu-eu-2.example.com:9443"
    removed = client.patch(f"{API}/gpu-eu-2", json={"webhook_url": ""}, headers=auth).json()
    assert (removed["webhook_url"], removed["webhook_endpoint"]) == (None, "")
    with_path = client.patch(f"{API}/gpu-eu-2", json={
        "webhook_url": "https://webhook.gpu-eu-2.example.com:9443/mutate-pods"}, headers=auth)
    assert with_path.status_code == 422
    assert with_path.json()["errors"][0]["field"] == "webhook_url"
    assert "the portal adds the path" in with_path.json()["errors"][0]["message"]
    trail = client.get("/api/v1/audit", params={"action": "host_cluster.update"},
                       headers=auth).json()["items"]
    urls = [(e["before"]["webhook_url"], e["after"]["webhook_url"]) for e in trail]
    assert (None, "https://webhook.gpu-eu-2.example.com:9443") in urls
    assert ("https://webhook.gpu-eu-2.example.com:9443", None) in urls
    default = client.get(f"{API}/{factories.env_host(db).name}", headers=auth).json()
    assert default["webhook_endpoint"] == "environment"


def test_the_host_page_sets_the_webhook_url(client: TestClient, db: Session,
                                            oidc_issuer: str) -> None:
    oidc.sign_in(client, DEMO_ADMIN)
    csrf = csrf_of(client.get("/admin/hosts").text)
    client.post("/admin/hosts", data={"csrf_token": csrf, "name": "gpu-eu-2",
                                      "kind": "kubeconfig", "kubeconfig": kubeconfig()})
    page = client.get("/admin/hosts/gpu-eu-2").text
    assert "<strong>none</strong>: set a webhook URL below" in page
    refused = client.post("/admin/hosts/gpu-eu-2", data={
        "csrf_token": csrf, "name": "gpu-eu-2", "webhook_url": "https://u:p@hook.example"})
    assert refused.status_code == 422 and "user name or password" in refused.text
    saved = client.post("/admin/hosts/gpu-eu-2", data={
        "csrf_token": csrf, "name": "gpu-eu-2", "webhook_url": "https://hook.example:9443"})
    assert saved.status_code == 200 and "https://hook.example:9443/mutate-pods/hosts/" in saved.text
    cleared = client.post("/admin/hosts/gpu-eu-2", data={
        "csrf_token": csrf, "name": "gpu-eu-2", "webhook_url": ""})
    assert "<strong>none</strong>" in cleared.text


def _with_mismatched_client_key() -> tuple[str, str]:
    """A kubeconfig whose client key belongs to another certificate, and that key's base64."""
    own, other = CA.client("portal"), CA.client("someone-else")
    text = kubeconfig_yaml("https://gpu-eu-2.example.com:6443", CA.cert_pem,
                           client=KeyPair(own.cert_pem, other.key_pem))
    return text, base64.b64encode(other.key_pem).decode()


def _key_lines(key_base64: str) -> list[str]:
    return [key_base64, *base64.b64decode(key_base64).decode().splitlines()[1:-1]]


def test_a_client_key_that_does_not_match_its_certificate_is_a_422_and_nothing_is_stored(
        client: TestClient, db: Session, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    auth = bearer(db, factories.user(db, admin=True))
    db.commit()
    registered = client.post(API, json=register_body(), headers=auth)
    assert registered.status_code == 201
    text, key = _with_mismatched_client_key()
    response = client.put(f"{API}/gpu-eu-2/credentials", headers=auth,
                          json={"kind": "kubeconfig", "kubeconfig": text})
    assert response.status_code == 422
    assert response.json()["errors"] == [{
        "field": "credentials.kubeconfig (client-key-data)",
        "message": "the client key does not belong to the client certificate"}]
    for line in _key_lines(key):
        assert line not in response.text and line not in caplog.text
    kept = client.get(f"{API}/gpu-eu-2", headers=auth).json()["credentials"]
    assert kept == registered.json()["credentials"]


def test_the_credentials_form_says_under_the_field_that_the_key_is_not_the_certificates(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    oidc.sign_in(client, DEMO_ADMIN)
    csrf = csrf_of(client.get("/admin/hosts").text)
    assert client.post("/admin/hosts", data={
        "csrf_token": csrf, "name": "gpu-eu-2", "kind": "kubeconfig",
        "kubeconfig": kubeconfig()}).status_code == 200
    text, key = _with_mismatched_client_key()
    refused = client.post("/admin/hosts/gpu-eu-2/credentials", data={
        "csrf_token": csrf, "kind": "kubeconfig", "kubeconfig": text})
    assert refused.status_code == 422
    form = refused.text.split('id="host-credentials"', 1)[1].split("</form>", 1)[0]
    textarea_onwards = form.split('name="kubeconfig"', 1)[1].split("</label>", 1)[0]
    assert ('<span class="field-error" role="alert" id="credentials-kubeconfig-error">the '
            'client key does not belong to the client certificate</span>') in textarea_onwards
    for line in _key_lines(key):
        assert line not in refused.text
