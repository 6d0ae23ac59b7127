"""Host health on real kube-apiservers: reachable with its version, KAI's Queue CRD present
(the KAI host) or absent (a bare API server), the portal's admission webhook registered or not,
the vCluster chart through the injected resolver; a closed port is a failed check, not an
exception. Then the worker's pass stores the results and audits a host turning unreachable."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.database.core import Database
from app.hosts import repository, service
from app.hosts.health import ADMISSION_WEBHOOK, run_checks
from app.hosts.schemas import HostCredentialsIn, HostRegister
from app.hosts.webhook_route import WebhookRoute
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector, HostTarget
from app.kube.manifests.admission import (
    HARDENING_WEBHOOK_NAME,
    WEBHOOK_CONFIGURATION_NAME,
    kai_queue_webhook,
)
from app.kube.port import Manifest
from app.reconcilers.hosts import HostHealthReconciler
from app.templates.charts import ChartLookup
from tests import factories
from tests.support.drive import run_due
from tests.support.kube_server import ApiServer, kubeconfig_yaml
from tests.support.web import free_port

pytestmark = pytest.mark.kube_server


class Charts:
    """The templates domain's chart resolver stands behind this port in the app."""

    def __init__(self, problem: str | None = None) -> None:
        self.asked: list[tuple[str, str, str]] = []
        self._problem = problem

    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        self.asked.append((repo, chart, version))
        return ChartLookup(self._problem)


def results(server_kubeconfig: str, settings: Settings,
            charts: Charts | None = None) -> dict[str, tuple[bool, str]]:
    port = ClientConnector(settings).probe(HostTarget(1, "h", server_kubeconfig))
    try:
        found = run_checks(port, settings, charts or Charts())
    finally:
        if isinstance(port, KubernetesAdapter):
            port.close()
    return {r.name: (r.passed, r.message) for r in found}


@pytest.fixture
def webhook_on_bare(bare_api: ApiServer) -> Iterator[None]:
    bare = bare_api.adapter()
    bare.apply(kai_queue_webhook("-----BEGIN CERTIFICATE-----\n", url="https://127.0.0.1:1/x",
                                 service_name="s", service_namespace="n"))
    yield
    bare.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                WEBHOOK_CONFIGURATION_NAME)
    bare.close()


def test_the_kai_host_is_reachable_with_the_queue_crd(kai_host: ApiServer,
                                                       settings: Settings) -> None:
    charts = Charts()
    found = results(kai_host.admin_kubeconfig, settings, charts)
    assert found["api-reachable"] == (True, "Kubernetes v1.32.13")
    assert found["kai-queue-crd"][0] is True
    assert found["vcluster-chart"][0] is True
    assert charts.asked == [(settings.vcluster_chart_repo, "vcluster",
                             settings.vcluster_chart_version)]


def test_a_bare_api_server_lacks_the_crd_and_shows_the_webhook_only_once_registered(
        bare_api: ApiServer, settings: Settings, request: pytest.FixtureRequest) -> None:
    before = results(bare_api.admin_kubeconfig, settings)
    assert before["kai-queue-crd"][0] is False
    assert "queues.scheduling.run.ai is missing" in before["kai-queue-crd"][1]
    assert before["admission-webhook"][0] is False
    request.getfixturevalue("webhook_on_bare")
    after = results(bare_api.admin_kubeconfig, settings)
    assert after["admission-webhook"] == (
        True, f"MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME} is present")


def _registered(bare_api: ApiServer, manifest: Manifest) -> KubernetesAdapter:
    bare = bare_api.adapter()
    bare.apply(manifest, force=True)
    return bare


def _configuration(url: str | None, settings: Settings) -> Manifest:
    return kai_queue_webhook("-----BEGIN CERTIFICATE-----\n", url=url,
                             service_name=settings.webhook_service_name,
                             service_namespace=settings.webhook_namespace)


def _webhook_check(target: HostTarget, settings: Settings) -> tuple[bool, str]:
    found = {r.name: r for r in service.checks_of(target, settings, ClientConnector(settings),
                                                  Charts())}
    return found[ADMISSION_WEBHOOK].passed, found[ADMISSION_WEBHOOK].message


def test_a_registration_calling_another_url_than_the_hosts_fails_the_check_saying_why(
        bare_api: ApiServer, settings: Settings) -> None:
    """An admin changed the host's webhook URL and the worker has not rewritten the
    configuration yet (or cannot): the check names what is registered and what is expected."""
    target = HostTarget(5, "gpu-us-2", bare_api.admin_kubeconfig,
                        webhook_url="https://webhook.new.example:9443")
    bare = _registered(bare_api, _configuration(
        "https://webhook.old.example:9443/mutate-pods/hosts/5", settings))
    try:
        passed, message = _webhook_check(target, settings)
        assert passed is False
        assert message.startswith(
            f"MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME} calls "
            "https://webhook.old.example:9443/mutate-pods/hosts/5, but the portal expects this "
            "host's API server to call https://webhook.new.example:9443/mutate-pods/hosts/5: "
            "the worker rewrites it at its next pass")
        assert "worker's log" in message
        bare.apply(_configuration("https://webhook.new.example:9443/mutate-pods/hosts/5",
                                  settings), force=True)
        assert _webhook_check(target, settings) == (
            True, f"MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME} is present and "
                  "calls https://webhook.new.example:9443/mutate-pods/hosts/5")
    finally:
        bare.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                    WEBHOOK_CONFIGURATION_NAME)
        bare.close()


def test_the_environments_host_is_expected_to_call_the_service_with_both_webhooks(
        bare_api: ApiServer, settings: Settings) -> None:
    """Without PORTAL_WEBHOOK_URL the environment's host calls the in-cluster Service; a
    registration from before the hardening webhook existed lacks it and fails the check."""
    service_call = (f"service {settings.webhook_namespace}/{settings.webhook_service_name}"
                    "/mutate-pods")
    assert settings.webhook_url is None
    old = _configuration(None, settings)
    old["webhooks"] = [w for w in old["webhooks"] if w["name"] != HARDENING_WEBHOOK_NAME]
    bare = _registered(bare_api, _configuration("https://elsewhere.example/mutate-pods",
                                                settings))
    port = ClientConnector(settings).probe(HostTarget(1, "h", bare_api.admin_kubeconfig))
    try:
        def check() -> tuple[bool, str]:
            found = {r.name: r for r in run_checks(port, settings, Charts(),
                                                   route=WebhookRoute(None))}
            return found[ADMISSION_WEBHOOK].passed, found[ADMISSION_WEBHOOK].message

        passed, message = check()
        assert passed is False and message.startswith(
            f"MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME} calls "
            f"https://elsewhere.example/mutate-pods, but the portal expects this host's API "
            f"server to call {service_call}")
        bare.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                    WEBHOOK_CONFIGURATION_NAME)
        bare.apply(old, force=True)
        passed, message = check()
        assert passed is False and message.startswith(
            f"MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME} lacks webhook "
            f"{HARDENING_WEBHOOK_NAME}")
        bare.apply(_configuration(None, settings), force=True)
        assert check() == (True, f"MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME} "
                                 f"is present and calls {service_call}")
    finally:
        bare.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                    WEBHOOK_CONFIGURATION_NAME)
        if isinstance(port, KubernetesAdapter):
            port.close()
        bare.close()


def test_a_closed_port_is_a_failed_check_not_an_exception(kai_host: ApiServer,
                                                          settings: Settings) -> None:
    closed = kubeconfig_yaml(f"https://127.0.0.1:{free_port()}", kai_host.ca.cert_pem, token="t")
    found = results(closed, settings, Charts("could not read index.yaml"))
    assert found["api-reachable"][0] is False
    assert "Connection refused" in found["api-reachable"][1]
    assert found["kai-queue-crd"] == (False, "not checked: the API server is not reachable")
    assert found["vcluster-chart"] == (False, "could not read index.yaml")


def test_the_worker_stores_each_hosts_health_and_audits_it_turning_unreachable(
        kai_host: ApiServer, database: Database) -> None:
    settings = Settings(env="test", database_url="sqlite://", worker_resync_seconds=300)
    with database.transaction() as db:
        admin = Principal(user=factories.user(db, admin=True), via="token")
        service.register_host(db, admin, settings, HostRegister(
            name="gpu-eu-2", credentials=HostCredentialsIn(
                kind="kubeconfig", kubeconfig=kai_host.admin_kubeconfig)))
    worker = HostHealthReconciler(settings, database, ClientConnector(settings), Charts())
    run_due(worker, "w1")
    with database.transaction() as db:
        row = repository.host_by_name(db, "gpu-eu-2")
        default = repository.default_host(db)
        assert row is not None and default is not None
        assert row.health_reachable is True and row.health_checked_at is not None
        assert default.health_reachable is False  # no PORTAL_KUBECONFIG in this test
        service.replace_credentials(db, admin, settings, "gpu-eu-2", HostCredentialsIn(
            kind="token", server=f"https://127.0.0.1:{free_port()}", token="t",
            ca_certificate=kai_host.ca.cert_pem.decode()))
        row.health_reachable = True  # as last seen before the move
    assert run_due(worker, "w1") == 1  # the new credentials enqueued the host: checked at once
    with database.transaction() as db:
        row = repository.host_by_name(db, "gpu-eu-2")
        assert row is not None and row.health_reachable is False
        events = db.scalars(select(AuditEvent).where(
            AuditEvent.action == "host_cluster.unreachable")).all()
        assert [(e.actor_label, e.target_id) for e in events] == [("host-health", str(row.id))]
