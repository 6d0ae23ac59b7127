"""The admission webhook on every host cluster, on in-memory hosts: the configuration each host
gets (its own URL naming the host, one caBundle), hosts without a URL, a host that fails, and
the webhook answering a review with the namespace labels of the host its path names."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from cryptography import x509
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.database.core import Database
from app.hosts import service as hosts_service
from app.hosts.health import ADMISSION_WEBHOOK, NO_WEBHOOK_URL, run_checks
from app.hosts.schemas import HostCredentialsIn, HostRegister
from app.hosts.webhook_route import host_id_of, route_of, webhook_url_problem
from app.kit.config import Settings
from app.kube.connector import HostTarget
from app.kube.errors import KubeError
from app.kube.manifests import labels as lbl
from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_NAME, kai_queue_webhook
from app.kube.manifests.webhook import TLS_SECRET_NAME
from app.kube.memory import InMemoryKube
from app.kube.port import KubePort, Manifest
from app.lab.pki import CertificateAuthority
from app.reconcilers.webhook import WebhookReconciler, serving_hosts
from app.webhook import certificates as certs
from app.webhook import mutation
from app.webhook.secret import read_secret, unbase64
from app.webhook.server import HostNamespaces, NamespaceLabels, Webhook
from app.workqueue import WEBHOOK
from app.workqueue.repository import items
from tests import factories
from tests.support.drive import run_due
from tests.support.kube import PerHostConnector
from tests.support.kube_server import kubeconfig_yaml
from tests.webhook.support import MWC, client_config

NAMESPACE = "gpu-tenant-portal"
CA = CertificateAuthority()
POD_NAMESPACE = "t-acme--train"


class Unreachable(InMemoryKube):
    def get(self, *args: Any, **kwargs: Any) -> Manifest | None:
        raise KubeError("connection refused", reason="Unreachable")


def settings(**extra: Any) -> Settings:
    return Settings(env="test", database_url="sqlite://", worker_resync_seconds=300, **extra)


def _hosts(database: Database) -> dict[str, int]:
    with database.transaction() as db:
        factories.env_host(db)
        us = factories.registered_host(db, "gpu-us-1", "us")
        us.webhook_url = "https://hook.us.example:9443/"
        ap = factories.registered_host(db, "gpu-ap-1", "ap", webhook=False)
        down = factories.registered_host(db, "gpu-down", "us")
        return {"gpu-us-1": us.id, "gpu-ap-1": ap.id, "gpu-down": down.id}


def test_each_host_gets_its_own_url_and_the_one_ca_bundle(
    sqlite_database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    ids = _hosts(sqlite_database)
    env, us, ap = InMemoryKube(), InMemoryKube(), InMemoryKube()
    # A host whose URL was removed keeps no configuration nobody updates.
    ap.seed(kai_queue_webhook("", url="https://old.example/mutate-pods/hosts/1",
                              service_name="x", service_namespace="y"))
    connector = PerHostConnector({"default": env, "gpu-us-1": us, "gpu-ap-1": ap,
                                  "gpu-down": Unreachable()})
    worker = WebhookReconciler(settings(), sqlite_database, connector)
    with caplog.at_level(logging.WARNING):
        assert run_due(worker, "w1") == 1  # the one key
    # the Secret, two configurations, one removed
    assert [c.kind for c in env.writes() + us.writes() + ap.writes() if c.kind != "Namespace"
            ] == ["Secret", "MutatingWebhookConfiguration", "MutatingWebhookConfiguration",
                  "MutatingWebhookConfiguration"]
    secret = read_secret(env.get("v1", "Secret", TLS_SECRET_NAME, NAMESPACE))
    assert secret.pair is not None
    for kube in (env, us):
        ca_bundle = unbase64(client_config(kube)["caBundle"])
        assert certs.bundle_certificates(ca_bundle) == secret.bundle
    assert client_config(env)["service"]["path"] == "/mutate-pods"
    assert client_config(us)["url"] == (
        f"https://hook.us.example:9443/mutate-pods/hosts/{ids['gpu-us-1']}")
    assert "hook.us.example" in dns_names(secret.pair.cert_pem)
    assert ap.get(*MWC, WEBHOOK_CONFIGURATION_NAME) is None
    assert "could not be registered on host cluster gpu-down" in caplog.text
    with sqlite_database.session() as db:
        [item] = items(db, WEBHOOK)
    assert item.attempts == 1 and "gpu-down" in (item.last_error or "")  # retried, backing off
    with sqlite_database.session() as db:
        events = {(e.action, e.target_id) for e in db.scalars(select(AuditEvent))}
    assert {("webhook.configuration_registered", str(ids["gpu-us-1"])),
            ("webhook.configuration_removed", str(ids["gpu-ap-1"]))} <= events


def dns_names(cert_pem: str) -> list[str]:
    """The DNS names the serving certificate is valid for."""
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return list(names.get_values_for_type(x509.DNSName))


def test_a_new_host_url_is_put_in_the_certificate(sqlite_database: Database) -> None:
    """Adding a host whose URL names another server issues a certificate for it too; the
    previous one stays trusted during the change."""
    env, us = InMemoryKube(), InMemoryKube()
    with sqlite_database.transaction() as db:
        factories.env_host(db)
    connector = PerHostConnector({"default": env, "gpu-us-1": us})
    worker = WebhookReconciler(settings(), sqlite_database, connector)
    run_due(worker, "w1")
    first = read_secret(env.get("v1", "Secret", TLS_SECRET_NAME, NAMESPACE)).pair
    with sqlite_database.transaction() as db:
        admin = Principal(user=factories.user(db, admin=True), via="token")
        hosts_service.register_host(db, admin, settings(), HostRegister(
            name="gpu-us-1", region="us", webhook_url="https://webhook.gpu-us-1.example:9443",
            credentials=HostCredentialsIn(kind="kubeconfig", kubeconfig=kubeconfig_yaml(
                "https://gpu-us-1.example:6443", CA.cert_pem, token="t"))))
    assert run_due(worker, "w1") == 1  # registering enqueued the key: due at once
    second = read_secret(env.get("v1", "Secret", TLS_SECRET_NAME, NAMESPACE))
    assert first is not None and second.pair is not None
    assert second.pair.cert_pem != first.cert_pem
    assert second.bundle == [first.cert_pem, second.pair.cert_pem]
    assert certs.bundle_certificates(unbase64(client_config(us)["caBundle"])) == second.bundle


def test_serving_hosts_add_each_hosts_url_host() -> None:
    env = HostTarget(1, "default")
    us = HostTarget(2, "gpu-us-1", "kubeconfig", webhook_url="https://10.1.2.3:9443")
    ap = HostTarget(3, "gpu-ap-1", "kubeconfig")
    routes = [r for r in (route_of(t, settings()) for t in (env, us, ap)) if r is not None]
    assert serving_hosts(settings(), routes) == [
        "gpu-tenant-portal-webhook.gpu-tenant-portal.svc",
        "gpu-tenant-portal-webhook.gpu-tenant-portal.svc.cluster.local", "10.1.2.3"]
    assert route_of(ap, settings()) is None
    with_url = settings(webhook_url="https://hook.example:9443")
    env_route = route_of(env, with_url)
    assert env_route is not None and env_route.url == "https://hook.example:9443/mutate-pods"


@pytest.mark.parametrize(("url", "problem"), [
    ("https://hook.example:9443", None), ("https://10.0.0.5", None),
    ("http://hook.example", "must start with https://"),
    ("https://user:pw@hook.example", "must not carry a user name or password"),
    ("https://hook.example/?a=1", "must not carry a query or a fragment"),
    ("https://hook.example:port", "is not a URL"), ("https://", "names no host"),
    ("https://hook.example:9443/mutate-pods/hosts/2", "must be the base address, without "
     "/mutate-pods: the portal adds the path (e.g. https://hook.example:9443)")])
def test_webhook_urls_the_api_server_could_call(url: str, problem: str | None) -> None:
    assert webhook_url_problem(url) == problem


def test_paths_name_hosts_by_id() -> None:
    assert host_id_of("/mutate-pods/hosts/12") == 12
    assert host_id_of("/mutate-pods") is None
    assert host_id_of("/mutate-pods/hosts/x") is None
    assert host_id_of("/mutate-pods/hosts/1/2") is None


def _namespace(queue: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": POD_NAMESPACE, "labels": {lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE,
                                          lbl.PLACEMENT: "shared-pool", lbl.QUEUE: queue}}}


def _review() -> dict[str, Any]:
    pod = {"metadata": {"name": "p", "namespace": POD_NAMESPACE,
                        "labels": {lbl.VCLUSTER_SYNCED_MARKER: "train"}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "namespace": POD_NAMESPACE,
                        "object": pod}}


def _queue_patched(answer: mutation.Review) -> str | None:
    """The queue label the answer's patch sets (None: no patch)."""
    response = answer["response"]
    if not response.get("patch"):
        return None
    patch = json.loads(base64.b64decode(response["patch"]))
    return next((str(op["value"]) for op in patch if op["path"].startswith(
        "/metadata/labels/")), None)


def test_a_review_for_a_host_is_answered_with_that_hosts_namespace_labels() -> None:
    env, us = InMemoryKube(), InMemoryKube()
    env.seed(_namespace("acme--train"))
    us.seed(_namespace("acme--train-on-us"))
    looked_up: list[int] = []
    clock = [0.0]

    def lookup(host_id: int) -> KubePort | None:
        looked_up.append(host_id)
        return us if host_id == 7 else None

    webhook = Webhook(NamespaceLabels(env), HostNamespaces(lookup, ttl_seconds=60,
                                                           clock=lambda: clock[0]))
    assert _queue_patched(webhook.answer(_review())) == "acme--train"
    assert _queue_patched(webhook.answer(_review(), 7)) == "acme--train-on-us"
    unknown = webhook.answer(_review(), 99)["response"]
    assert unknown["allowed"] is False and unknown["status"]["code"] == 503
    assert "host cluster 99" in unknown["status"]["message"]
    webhook.answer(_review(), 7)
    assert looked_up == [7, 99]  # kept for the TTL
    clock[0] = 61
    webhook.answer(_review(), 7)
    assert looked_up == [7, 99, 7]


def test_a_database_failure_keeps_the_last_known_host_a_while() -> None:
    us = InMemoryKube()
    us.seed(_namespace("acme--train"))
    answers: list[KubePort | Exception] = [us, RuntimeError("database down")]
    clock = [0.0]

    def lookup(host_id: int) -> KubePort | None:
        found = answers.pop(0)
        if isinstance(found, Exception):
            raise found
        return found

    webhook = Webhook(NamespaceLabels(InMemoryKube()),
                      HostNamespaces(lookup, ttl_seconds=60, clock=lambda: clock[0]))
    assert _queue_patched(webhook.answer(_review(), 3)) == "acme--train"
    clock[0] = 61
    assert _queue_patched(webhook.answer(_review(), 3)) == "acme--train"
    failing = Webhook(NamespaceLabels(InMemoryKube()), HostNamespaces(
        lambda host_id: (_ for _ in ()).throw(RuntimeError("database down"))))
    refused = failing.answer(_review(), 3)["response"]
    assert refused["allowed"] is False and refused["status"]["code"] == 503


def test_a_host_without_a_webhook_url_fails_its_check_saying_what_to_do() -> None:
    results = {r.name: r for r in run_checks(InMemoryKube(), settings(), None,
                                             webhook_routed=False)}
    check = results[ADMISSION_WEBHOOK]
    assert check.passed is False and check.message == NO_WEBHOOK_URL
    assert "--webhook-url" in check.message and "shared-pool" in check.message
    routed = {r.name: r for r in run_checks(InMemoryKube(), settings(), None)}
    assert "is missing" in routed[ADMISSION_WEBHOOK].message
