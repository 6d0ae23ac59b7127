"""The admission webhook on two real host clusters: the environment's host (``host_api``) and a
registered host ``us`` (its own kube-apiserver) with a webhook URL.

The worker's reconciler registers the configuration on both, each with the URL its API server
calls (``us``'s path names it) and the one caBundle; ``portal webhook`` runs in-process on
loopback and answers a review for ``us`` with ``us``'s namespace labels, read with ``us``'s
credentials from the database. ``us``'s API server itself calls it for a synced pod, trusting
the caBundle, and the pod lands in ``us``'s leaf queue.
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config

from app.auth.principal import Principal
from app.database.core import Database
from app.hosts import service as hosts
from app.hosts.schemas import HostCredentialsIn, HostRegister
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.manifests import ClusterSpec, ManifestPolicy, namespace
from app.kube.manifests import labels as lbl
from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_NAME
from app.kube.manifests.names import cluster_queue_name
from app.kube.manifests.webhook import TLS_SECRET_NAME
from app.kube.port import Manifest
from app.reconcilers.webhook import WebhookReconciler
from app.webhook import certificates as certs
from app.webhook.secret import read_secret, unbase64
from app.webhook.server import WebhookServer, host_lookup
from tests import factories
from tests.support.drive import run_due
from tests.support.kube_server import ApiServer
from tests.support.waiting import wait_for
from tests.support.web import free_port
from tests.webhook.support import MWC, RESTRICTED, client_config

pytestmark = pytest.mark.kube_server
SYNCED = {lbl.VCLUSTER_SYNCED_MARKER: "train"}
k8s_config: Any = _k8s_config  # untyped loaders


@dataclass
class TwoHosts:
    settings: Settings
    env: KubernetesAdapter
    us: KubernetesAdapter
    us_api: ApiServer
    us_id: int
    port: int
    server: WebhookServer
    tenant: str
    namespace: str

    def trust(self) -> ssl.SSLContext:
        pair = read_secret(self.env.get("v1", "Secret", TLS_SECRET_NAME,
                                        self.settings.webhook_namespace)).pair
        assert pair is not None
        return ssl.create_default_context(cadata=pair.cert_pem)


def _namespaces(tenant: str) -> tuple[Manifest, Manifest]:
    """The same cluster's namespace as a shared-pool one (on us) and as a dedicated-nodes one
    (on the environment's host): same name, labels that differ."""
    def spec(placement: Literal["shared-pool", "dedicated-nodes"]) -> ClusterSpec:
        return ClusterSpec(tenant=tenant, name="train", kubernetes_version="1.32.4",
                           placement=placement, gpu_class=None, gpus=0, cpu_millicores=1000,
                           memory_mib=1024, endpoint="https://train.acme.vc.example.com")
    return (namespace(spec("shared-pool"), ManifestPolicy()),
            namespace(spec("dedicated-nodes"), ManifestPolicy()))


@pytest.fixture
def two_hosts(host_api: ApiServer, us_api: ApiServer, own_pg_database: Database,
              tmp_path: Path) -> Iterator[TwoHosts]:
    port = free_port()
    settings = Settings(
        env="test", database_url="sqlite://",
        kubeconfig=str(host_api.write_admin_kubeconfig(tmp_path / "kubeconfig")),
        webhook_namespace=f"gtp-hooks-{secrets.token_hex(3)}",
        webhook_url=f"https://127.0.0.1:{port}")
    with own_pg_database.transaction() as db:
        factories.env_host(db)
        admin = Principal(user=factories.user(db, admin=True), via="token")
        us_id = hosts.register_host(db, admin, settings, HostRegister(
            name="gpu-us-1", region="us", webhook_url=f"https://127.0.0.1:{port}",
            credentials=HostCredentialsIn(kind="kubeconfig",
                                          kubeconfig=us_api.admin_kubeconfig))).id
    env, us = host_api.adapter(), us_api.adapter()
    tenant = f"wh{secrets.token_hex(3)}"
    shared, dedicated = _namespaces(tenant)
    server = WebhookServer(env, settings.webhook_namespace, port=port,
                           hosts=host_lookup(settings, own_pg_database,
                                             ClientConnector(settings)))
    try:
        us.apply(shared, force=True)
        # No controller-manager on us: the ServiceAccount admission plugin needs "default".
        us.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": "default", "namespace": shared["metadata"]["name"]}},
                 force=True)
        env.apply(dedicated, force=True)
        yield TwoHosts(settings, env, us, us_api, us_id, port, server, tenant,
                       shared["metadata"]["name"])
    finally:
        server.stop()
        for adapter in (env, us):  # a Fail webhook left behind would refuse others' pods
            adapter.delete(*MWC, WEBHOOK_CONFIGURATION_NAME)
            adapter.delete("v1", "Namespace", shared["metadata"]["name"])
        env.delete("v1", "Namespace", settings.webhook_namespace)
        env.close()
        us.close()


def _review(namespace_name: str) -> dict[str, Any]:
    pod = {"metadata": {"name": "p", "namespace": namespace_name, "labels": dict(SYNCED)},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "namespace": namespace_name,
                        "object": pod}}


def _patched_queue(answer: dict[str, Any]) -> str | None:
    patch = answer["response"].get("patch")
    if not patch:
        return None
    ops = json.loads(base64.b64decode(patch))
    return next((str(op["value"]) for op in ops
                 if op["path"].startswith("/metadata/labels/")), None)


def _dry_run_pod(api: ApiServer, namespace_name: str) -> Manifest:
    api_client = k8s_config.new_client_from_config_dict(yaml.safe_load(api.admin_kubeconfig))
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"p-{secrets.token_hex(3)}", "namespace": namespace_name,
                        "labels": dict(SYNCED)},
           "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                    "securityContext": RESTRICTED}]}}
    core: Any = k8s_client.CoreV1Api(api_client)
    response = core.create_namespaced_pod(
        namespace_name, pod, dry_run="All", _preload_content=False)
    created: Manifest = json.loads(response.data)
    return created


def test_the_webhook_is_registered_on_both_hosts_and_answers_each_with_its_own_labels(
    two_hosts: TwoHosts, own_pg_database: Database
) -> None:
    connector = ClientConnector(two_hosts.settings)
    reconciler = WebhookReconciler(two_hosts.settings, own_pg_database, connector)
    assert run_due(reconciler, "worker-1") == 1  # the one key: the Secret, both configurations
    secret = read_secret(two_hosts.env.get("v1", "Secret", TLS_SECRET_NAME,
                                           two_hosts.settings.webhook_namespace))
    base = f"https://127.0.0.1:{two_hosts.port}/mutate-pods"
    assert client_config(two_hosts.env)["url"] == base
    assert client_config(two_hosts.us)["url"] == f"{base}/hosts/{two_hosts.us_id}"
    for adapter in (two_hosts.env, two_hosts.us):
        ca_bundle = unbase64(client_config(adapter)["caBundle"])
        assert certs.bundle_certificates(ca_bundle) == secret.bundle

    two_hosts.server.start()
    assert two_hosts.server.wait_until_serving(10)
    queue = cluster_queue_name(two_hosts.tenant, "train")
    body = json.dumps(_review(two_hosts.namespace))

    def post(path: str) -> dict[str, Any]:
        response = httpx.post(f"https://127.0.0.1:{two_hosts.port}{path}", content=body,
                              verify=two_hosts.trust(), timeout=10,
                              headers={"Content-Type": "application/json"})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    # The same namespace name: shared-pool on us, dedicated nodes on the environment's host.
    assert _patched_queue(post(f"/mutate-pods/hosts/{two_hosts.us_id}")) == queue
    assert _patched_queue(post("/mutate-pods")) is None
    unknown = post("/mutate-pods/hosts/999999")["response"]
    assert unknown["allowed"] is False and unknown["status"]["code"] == 503

    # us's API server calls the webhook itself (its caBundle trusts the certificate).
    def mutated() -> bool:
        try:
            created = _dry_run_pod(two_hosts.us_api, two_hosts.namespace)
        except k8s_client.ApiException:
            return False
        return bool(created["spec"].get("schedulerName") == lbl.KAI_SCHEDULER_NAME)

    wait_for(mutated, "us's API server to call the webhook")
    created = _dry_run_pod(two_hosts.us_api, two_hosts.namespace)
    assert created["metadata"]["labels"][lbl.KAI_QUEUE_LABEL] == queue

    env = connector.host()
    assert env is not None
    # converged on both hosts: nothing to write
    assert reconciler.ensure(env, reconciler.plan()) == 0
