"""`portal webhook`'s HTTPS server, on loopback, with the in-memory host cluster behind it."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from app.database.core import Database
from app.kit.config import Settings
from app.kube.errors import TransientKubeError
from app.kube.manifests import labels as lbl
from app.kube.manifests.webhook import TLS_SECRET_NAME, webhook_tls_secret
from app.kube.memory import InMemoryKube
from app.reconcilers.webhook import WebhookReconciler
from app.webhook import certificates as certs
from app.webhook.secret import read_secret
from app.webhook.server import MAX_BODY_BYTES, WebhookServer
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.web import free_port

NAMESPACE = "gpu-tenant-portal"
POD_NAMESPACE = "t-acme--train"


@dataclass
class Served:
    kube: InMemoryKube
    server: WebhookServer
    settings: Settings
    database: Database

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"

    def trust(self) -> ssl.SSLContext:
        """A client that trusts exactly the certificate in the Secret, as the API server does."""
        return ssl.create_default_context(cadata=self.secret_certificate())

    def served_certificate(self) -> str:
        return certs.bundle_certificates(ssl.get_server_certificate(("127.0.0.1",
                                                                     self.server.port)))[0]

    def secret_certificate(self) -> str:
        pair = read_secret(self.kube.get("v1", "Secret", TLS_SECRET_NAME, NAMESPACE)).pair
        assert pair is not None
        return pair.cert_pem

    def rotate(self, at: datetime) -> None:
        run_due(WebhookReconciler(self.settings, self.database, InMemoryConnector(self.kube),
                                  now=lambda: at), "w1")


@pytest.fixture
def served(sqlite_database: Database) -> Iterator[Served]:
    kube = InMemoryKube()
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": POD_NAMESPACE, "labels": {lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE,
                                          lbl.PLACEMENT: "shared-pool", lbl.QUEUE: "acme--train"}}})
    port = free_port()
    settings = Settings(env="test", database_url="sqlite://",
                        webhook_url=f"https://127.0.0.1:{port}")
    handle = Served(kube, WebhookServer(kube, NAMESPACE, port=port), settings, sqlite_database)
    handle.rotate(datetime.now(UTC) - timedelta(days=61))
    handle.server.start()
    try:
        assert handle.server.wait_until_serving(10)
        yield handle
    finally:
        handle.server.stop()


def post(served: Served, body: bytes, path: str = "/mutate-pods") -> httpx.Response:
    return httpx.post(served.url + path, content=body, verify=served.trust(), timeout=5,
                      headers={"Content-Type": "application/json"})


def review(labels: dict[str, str]) -> dict[str, Any]:
    pod = {"metadata": {"name": "p", "namespace": POD_NAMESPACE, "labels": labels},
           "spec": {"containers": [{"name": "c", "image": "busybox"}],
                    "schedulerName": "default-scheduler"}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-9", "operation": "CREATE", "namespace": POD_NAMESPACE,
                        "object": pod}}


def test_it_serves_the_secrets_certificate_and_reports_healthy(served: Served) -> None:
    assert served.served_certificate() == served.secret_certificate()
    health = httpx.get(served.url + "/healthz", verify=served.trust(), timeout=5)
    assert health.status_code == 200
    assert health.json()["certificate"] == certs.fingerprint(served.secret_certificate())


def test_it_answers_an_admission_review(served: Served) -> None:
    response = post(served, json.dumps(review({lbl.VCLUSTER_SYNCED_MARKER: "train"})).encode())
    assert response.status_code == 200
    answer = response.json()["response"]
    assert answer["uid"] == "u-9" and answer["allowed"] is True and answer["patch"]


def test_bad_requests_get_json_errors(served: Served) -> None:
    assert post(served, b"{not json").status_code == 400
    assert post(served, b'{"kind": "Pod"}').json()["error"].startswith("expected")
    assert post(served, b"{}", path="/elsewhere").status_code == 404
    assert b" 413 " in raw_post(served, f"Content-Length: {MAX_BODY_BYTES + 1}")
    assert b" 411 " in raw_post(served, "Transfer-Encoding: chunked")


def raw_post(served: Served, header: str) -> bytes:
    """The status line for a POST that announces a body but never sends it."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", served.server.port), 5) as raw, \
            context.wrap_socket(raw) as tls:
        tls.sendall(f"POST /mutate-pods HTTP/1.1\r\nHost: x\r\n{header}\r\n\r\n".encode())
        return tls.recv(200).split(b"\r\n")[0]


def test_a_rotated_certificate_is_served_after_a_reload_without_a_restart(
        served: Served) -> None:
    before = served.served_certificate()
    served.rotate(datetime.now(UTC))
    assert served.secret_certificate() != before
    assert served.server.reload_certificate() is True
    assert served.served_certificate() == served.secret_certificate()
    assert served.server.reload_certificate() is False  # nothing new


def test_a_certificate_the_configuration_does_not_trust_yet_is_not_served(
        served: Served) -> None:
    before = served.served_certificate()
    untrusted = certs.issue(["127.0.0.1"], datetime.now(UTC), timedelta(days=90))
    live = served.kube.get("v1", "Secret", TLS_SECRET_NAME, NAMESPACE)
    assert live is not None
    served.kube.apply(webhook_tls_secret(NAMESPACE, cert_pem=untrusted.cert_pem,
                                         key_pem=untrusted.key_pem,
                                         bundle_pem=untrusted.cert_pem, resource_version=None))
    assert served.server.reload_certificate() is False
    assert served.served_certificate() == before


def test_a_stopped_webhook_closes_kept_alive_connections(served: Served) -> None:
    with httpx.Client(verify=served.trust(), timeout=5) as client:
        assert client.get(served.url + "/healthz").status_code == 200
        served.server.stop()
        with pytest.raises(httpx.HTTPError):
            client.get(served.url + "/healthz")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", served.server.port), 1).close()


def test_a_namespace_it_cannot_read_refuses_the_pod_with_a_reason(served: Served) -> None:
    served.kube.inject("get", TransientKubeError("etcd is slow"),
                       match=lambda call: call.kind == "Namespace")
    answer = post(served, json.dumps(review({lbl.VCLUSTER_SYNCED_MARKER: "train"})).encode())
    response = answer.json()["response"]
    assert response["allowed"] is False and response["status"]["code"] == 503
    assert POD_NAMESPACE in response["status"]["message"]


def test_a_shared_pool_namespace_is_read_once_within_the_cache_time(served: Served) -> None:
    served.kube.reset_calls()
    for _ in range(3):
        post(served, json.dumps(review({lbl.VCLUSTER_SYNCED_MARKER: "train"})).encode())
    assert [c.name for c in served.kube.calls if c.kind == "Namespace"] == [POD_NAMESPACE]
