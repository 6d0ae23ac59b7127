"""The webhook against a real kube-apiserver: what a pod synced by vCluster lands with.

The worker's reconciler registers the webhook (``PORTAL_WEBHOOK_URL`` pointing at an in-process
server on loopback) and its certificate; pods are written through the portal's Kubernetes port
as the vCluster syncer would write them. The queue guard policy is applied as the backstop.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.database import migrate
from app.database.core import Database
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kube.errors import KubeError, PermanentKubeError
from app.kube.manifests import ClusterSpec, ManifestPolicy, namespace, platform_objects
from app.kube.manifests import labels as lbl
from app.kube.manifests.admission import WEBHOOK_CONFIGURATION_NAME
from app.kube.manifests.names import cluster_queue_name
from app.kube.manifests.webhook import TLS_SECRET_NAME
from app.kube.port import KubePort, Manifest
from app.reconcilers.webhook import WebhookReconciler
from app.webhook import certificates as certs
from app.webhook.secret import read_secret, unbase64
from app.webhook.server import WebhookServer
from tests.support.drive import run_due
from tests.support.kube_server import ApiServer
from tests.support.waiting import wait_for
from tests.support.web import free_port
from tests.webhook.support import MWC, RESTRICTED

pytestmark = pytest.mark.kube_server
RELEASE = "train"
SYNCED = {lbl.VCLUSTER_SYNCED_MARKER: RELEASE}
k8s_config: Any = _k8s_config  # untyped loaders


@dataclass
class Webhook:
    """Everything the module shares: the registered webhook, its server, the host API."""

    kube: KubernetesAdapter
    host_api: ApiServer
    settings: Settings
    database: Database
    reconciler: WebhookReconciler
    server: WebhookServer
    # The reconciler's wall clock is now + offset: the first certificate is made 61 days ago,
    # so that moving the clock to the present puts it in the rotation window (while every
    # certificate stays valid for the real API server).
    offset: list[timedelta] = field(default_factory=lambda: [timedelta(days=-61)])

    @property
    def port(self) -> int:
        return self.server.port

    def host(self) -> KubePort:
        host = ClientConnector(self.settings).host()
        assert host is not None
        return host

    def start_server(self) -> None:
        self.server = WebhookServer(self.host(), self.settings.webhook_namespace,
                                    port=self.port)
        self.server.start()
        assert self.server.wait_until_serving(10), "the webhook did not load its certificate"


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def webhook(host_api: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    folder = tmp_path_factory.mktemp("webhook")
    url = f"sqlite:///{folder / 'portal.db'}"
    migrate.upgrade(url)
    port = free_port()
    settings = Settings(
        env="test", database_url=url,
        kubeconfig=str(host_api.write_admin_kubeconfig(folder / "kubeconfig")),
        webhook_namespace=_unique("gtp-webhook-"),
        webhook_url=f"https://127.0.0.1:{port}")
    kube, database = host_api.adapter(), Database(url)
    backstop = [o for o in platform_objects(ManifestPolicy()) if o["kind"] != "Queue"]
    handle: Webhook | None = None
    try:
        for obj in backstop:
            kube.apply(obj, force=True)
        offset = [timedelta(days=-61)]
        reconciler = WebhookReconciler(settings, database, ClientConnector(settings),
                                       now=lambda: datetime.now(UTC) + offset[0])
        # one key: the Secret and the configuration
        assert run_due(reconciler, "test-worker") == 1
        handle = Webhook(kube, host_api, settings, database, reconciler,
                         WebhookServer(kube, settings.webhook_namespace, port=port), offset)
        handle.server.start()
        assert handle.server.wait_until_serving(10)
        yield handle
    finally:
        if handle is not None:
            handle.server.stop()
        # A Fail webhook left behind would refuse other tests' synced pods.
        kube.delete(*MWC, WEBHOOK_CONFIGURATION_NAME)
        for obj in backstop:
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        kube.delete("v1", "Namespace", settings.webhook_namespace)
        database.dispose()
        kube.close()


@pytest.fixture
def shared_pool(webhook: Webhook) -> Iterator[str]:
    """A tenant cluster's host namespace as the portal makes it (shared-pool, restricted)."""
    spec = ClusterSpec(tenant=_unique("wh"), name=RELEASE, kubernetes_version="1.32.4",
                       placement="shared-pool", gpu_class="NVIDIA-H100-80GB-HBM3", gpus=1,
                       cpu_millicores=1000,
                       memory_mib=1024, endpoint="https://train.acme.vc.example.com")
    name = _created_namespace(webhook.kube, namespace(spec, ManifestPolicy()))
    assert _queue_of(webhook.kube, name) == cluster_queue_name(spec.tenant, spec.name)
    try:
        _wait_until_mutating(webhook, name)
        yield name
    finally:
        webhook.kube.delete("v1", "Namespace", name)


@pytest.fixture
def hardened(webhook: Webhook) -> Iterator[str]:
    """A dedicated-nodes cluster's namespace from a template with user namespaces (issue 16)."""
    spec = ClusterSpec(tenant=_unique("hd"), name=RELEASE, kubernetes_version="1.32.4",
                       placement="dedicated-nodes", gpu_class=None, gpus=0, cpu_millicores=1000,
                       memory_mib=1024, endpoint="https://train.acme.vc.example.com",
                       user_namespaces=True)
    name = _created_namespace(webhook.kube, namespace(spec, ManifestPolicy()))
    try:
        wait_for(lambda: _dry_run_create(webhook, pod(name, SYNCED))["spec"].get("hostUsers")
              is False, f"the webhook to harden pods in {name}")
        yield name
    finally:
        webhook.kube.delete("v1", "Namespace", name)


@pytest.fixture
def baseline(webhook: Webhook) -> Iterator[str]:
    """A dedicated-nodes namespace at Pod Security baseline, without user namespaces."""
    spec = ClusterSpec(tenant=_unique("bl"), name=RELEASE, kubernetes_version="1.32.4",
                       placement="dedicated-nodes", gpu_class=None, gpus=0, cpu_millicores=1000,
                       memory_mib=1024, endpoint="https://train.acme.vc.example.com",
                       pod_security="baseline")
    name = _created_namespace(webhook.kube, namespace(spec, ManifestPolicy()))
    try:
        wait_for(lambda: "securityContext" in _dry_run_create(
            webhook, _without_pod_seccomp(pod(name, SYNCED)))["spec"],
            f"the webhook to harden pods in {name}")
        yield name
    finally:
        webhook.kube.delete("v1", "Namespace", name)


@pytest.fixture
def unmanaged(webhook: Webhook) -> Iterator[str]:
    name = _created_namespace(webhook.kube, {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": _unique("plain-")}})
    try:
        yield name
    finally:
        webhook.kube.delete("v1", "Namespace", name)


def _created_namespace(kube: KubePort, manifest: Manifest) -> str:
    name = str(manifest["metadata"]["name"])
    kube.apply(manifest, force=True)
    # The ServiceAccount admission plugin refuses pods until the controller made "default"
    # (automountServiceAccountToken: false does not spare the lookup).
    wait_for(lambda: kube.get("v1", "ServiceAccount", "default", name) is not None,
          f"the default ServiceAccount in {name}")
    return name


def _queue_of(kube: KubePort, name: str) -> str:
    found = kube.get("v1", "Namespace", name)
    assert found is not None
    return str(found["metadata"]["labels"][lbl.QUEUE])


def pod(namespace_name: str, labels: dict[str, str] | None = None,
        scheduler: str | None = None, name: str | None = None) -> Manifest:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "securityContext": RESTRICTED}],
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    metadata: dict[str, Any] = {"name": name or _unique("p-"), "namespace": namespace_name}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _core(webhook: Webhook) -> Any:
    """The official client, for what the port does not do: plain updates and dry runs."""
    api_client = k8s_config.new_client_from_config_dict(
        yaml.safe_load(webhook.host_api.admin_kubeconfig))
    return k8s_client.CoreV1Api(api_client)


def _dry_run_create(webhook: Webhook, obj: Manifest) -> Manifest:
    response = _core(webhook).create_namespaced_pod(
        obj["metadata"]["namespace"], obj, dry_run="All", _preload_content=False)
    created: Manifest = json.loads(response.data)
    return created


def _wait_until_mutating(webhook: Webhook, namespace_name: str) -> None:
    """The API server picks up configurations and CA bundles asynchronously."""

    def mutated() -> bool:
        try:
            created = _dry_run_create(webhook, pod(namespace_name, SYNCED))
        except k8s_client.ApiException:
            return False
        return bool(created["spec"].get("schedulerName") == lbl.KAI_SCHEDULER_NAME)

    wait_for(mutated, f"the webhook to mutate pods in {namespace_name}")


def _update_labels(webhook: Webhook, live: Manifest, labels: dict[str, str]) -> Manifest:
    """A plain update (PUT) that replaces the pod's labels, as vCluster's syncer does."""
    body = {**live, "metadata": {**live["metadata"], "labels": labels}}
    response = _core(webhook).replace_namespaced_pod(
        live["metadata"]["name"], live["metadata"]["namespace"], body, _preload_content=False)
    updated: Manifest = json.loads(response.data)
    return updated


def _labels(obj: Manifest) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


# ----- the tests


def test_a_synced_pod_lands_in_kai_and_its_leaf_queue(webhook: Webhook, shared_pool: str) -> None:
    created = webhook.kube.apply(pod(shared_pool, {**SYNCED, "app": "trainer"}), force=True)
    assert created["spec"]["schedulerName"] == lbl.KAI_SCHEDULER_NAME
    assert _labels(created) == {**SYNCED, "app": "trainer",
                                lbl.KAI_QUEUE_LABEL: _queue_of(webhook.kube, shared_pool)}


def test_a_pod_naming_another_queue_is_refused(webhook: Webhook, shared_pool: str) -> None:
    with pytest.raises(PermanentKubeError) as refused:
        webhook.kube.apply(pod(shared_pool, {**SYNCED, lbl.KAI_QUEUE_LABEL: "other--queue"}),
                           force=True)
    assert refused.value.status == 403
    assert "other--queue" in refused.value.message
    assert _queue_of(webhook.kube, shared_pool) in refused.value.message


def test_a_pod_asking_for_another_scheduler_is_refused(webhook: Webhook,
                                                       shared_pool: str) -> None:
    with pytest.raises(PermanentKubeError) as refused:
        webhook.kube.apply(pod(shared_pool, SYNCED, scheduler="volcano"), force=True)
    assert refused.value.status == 403 and "volcano" in refused.value.message


def test_an_update_that_drops_the_queue_label_gets_it_back(webhook: Webhook,
                                                           shared_pool: str) -> None:
    created = webhook.kube.apply(pod(shared_pool, SYNCED), force=True)
    updated = _update_labels(webhook, created, {**SYNCED, "app": "v2"})
    assert _labels(updated) == {**SYNCED, "app": "v2",
                                lbl.KAI_QUEUE_LABEL: _queue_of(webhook.kube, shared_pool)}
    assert updated["spec"]["schedulerName"] == lbl.KAI_SCHEDULER_NAME


def test_an_optional_config_map_volume_lands_as_the_projected_volume_kai_does_not_wait_for(
        webhook: Webhook, shared_pool: str) -> None:
    """vCluster's CoreDNS mounts the optional coredns-custom; KAI v0.12 waits for it."""
    obj = pod(shared_pool, SYNCED)
    obj["spec"]["volumes"] = [{"name": "custom", "configMap": {
        "name": "coredns-custom-x-kube-system-x-train", "optional": True}}]
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "custom", "mountPath": "/c"}]
    created = webhook.kube.apply(obj, force=True)
    volume = next(v for v in created["spec"]["volumes"] if v["name"] == "custom")
    assert "configMap" not in volume
    assert volume["projected"]["sources"] == [{"configMap": {
        "name": "coredns-custom-x-kube-system-x-train", "optional": True}}]
    # The syncer's later updates (labels) go through with the volume as it is.
    updated = _update_labels(webhook, created, {**SYNCED, "app": "v2"})
    assert updated["spec"]["volumes"] == created["spec"]["volumes"]


def test_pods_in_unmanaged_namespaces_and_unsynced_pods_are_untouched(
        webhook: Webhook, shared_pool: str, unmanaged: str) -> None:
    elsewhere = webhook.kube.apply(pod(unmanaged, SYNCED), force=True)
    own = webhook.kube.apply(pod(shared_pool, {"app": "vcluster"}), force=True)
    for created in (elsewhere, own):
        assert created["spec"]["schedulerName"] == "default-scheduler"
        assert lbl.KAI_QUEUE_LABEL not in _labels(created)


def test_rotation_keeps_pods_admitted(webhook: Webhook, shared_pool: str) -> None:
    host = webhook.host()
    before = read_secret(host.get("v1", "Secret", TLS_SECRET_NAME,
                                  webhook.settings.webhook_namespace)).pair
    assert before is not None
    webhook.offset[0] = timedelta(0)  # the clock moves into the rotation window
    assert webhook.reconciler.ensure(host) == 2
    assert webhook.reconciler.ensure(host) == 0  # converged despite the server's defaults

    secret = read_secret(host.get("v1", "Secret", TLS_SECRET_NAME,
                                  webhook.settings.webhook_namespace))
    configuration = host.get(*MWC, WEBHOOK_CONFIGURATION_NAME)
    assert secret.pair is not None and configuration is not None
    ca_bundle = unbase64(configuration["webhooks"][0]["clientConfig"]["caBundle"])
    assert secret.bundle == certs.bundle_certificates(ca_bundle) == [before.cert_pem,
                                                                      secret.pair.cert_pem]
    assert webhook.server.reload_certificate() is True
    served = ssl.get_server_certificate(("127.0.0.1", webhook.port))
    assert certs.bundle_certificates(served) == [secret.pair.cert_pem]

    _wait_until_mutating(webhook, shared_pool)
    created = webhook.kube.apply(pod(shared_pool, SYNCED), force=True)
    assert created["spec"]["schedulerName"] == lbl.KAI_SCHEDULER_NAME
    with webhook.database.session() as db:
        actions = list(db.scalars(select(AuditEvent.action).where(
            AuditEvent.actor_label == "webhook-reconciler", AuditEvent.tenant_id.is_(None))
            .order_by(AuditEvent.id)))
    assert actions == ["webhook.certificate_issued", "webhook.certificate_rotated"]


def test_without_the_webhook_synced_pods_are_refused_and_others_are_not(
        webhook: Webhook, shared_pool: str, unmanaged: str) -> None:
    webhook.server.stop()
    try:
        with pytest.raises(KubeError) as refused:
            webhook.kube.apply(pod(shared_pool, SYNCED), force=True)
        assert "kai-queue.gpu-tenant-portal.io" in refused.value.message
        created = webhook.kube.apply(pod(unmanaged, SYNCED), force=True)
        assert created["spec"]["schedulerName"] == "default-scheduler"
    finally:
        webhook.start_server()
    _wait_until_mutating(webhook, shared_pool)


def test_portal_webhook_serves_the_secrets_certificate_and_stops_on_sigterm(
        webhook: Webhook, sqlite_template: Path, tmp_path: Path) -> None:
    port = free_port()
    certs, database = tmp_path / "certs", tmp_path / "portal.db"
    certs.mkdir()
    shutil.copyfile(sqlite_template, database)  # migrated, as the webhook checks at its start
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env.update(PORTAL_KUBECONFIG=str(webhook.settings.kubeconfig),
               PORTAL_WEBHOOK_NAMESPACE=webhook.settings.webhook_namespace,
               PORTAL_DATABASE_URL=f"sqlite:///{database}")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.process.cli", "webhook", "--host", "127.0.0.1",
         "--port", str(port), "--cert-dir", str(certs)],
        env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        pair = read_secret(webhook.host().get("v1", "Secret", TLS_SECRET_NAME,
                                              webhook.settings.webhook_namespace)).pair
        assert pair is not None
        trust = ssl.create_default_context(cadata=pair.cert_pem)
        wait_for(lambda: _healthy(f"https://127.0.0.1:{port}/healthz", trust), "portal webhook")
        assert list(certs.iterdir()) == []  # the key files were only there to be loaded
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
        _, errors = process.communicate(timeout=10)
    assert "PRIVATE KEY" not in errors


def _healthy(url: str, trust: ssl.SSLContext) -> bool:
    try:
        return httpx.get(url, verify=trust, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# ----- runtime hardening (issue 16): user namespaces and seccomp in hardened namespaces


def _without_pod_seccomp(manifest: Manifest) -> Manifest:
    """The restricted pod with its profile on the containers only, as tenants often write it."""
    manifest["spec"].pop("securityContext", None)
    return manifest


def test_a_synced_pod_in_a_hardened_namespace_gets_its_own_user_namespace(
        webhook: Webhook, hardened: str) -> None:
    created = webhook.kube.apply(_without_pod_seccomp(pod(hardened, SYNCED)), force=True)
    assert created["spec"]["hostUsers"] is False
    assert created["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # A dedicated-nodes namespace: KAI's scheduler and queue are not the hardening's business.
    assert created["spec"]["schedulerName"] == "default-scheduler"


def test_a_pod_asking_for_host_users_is_refused(webhook: Webhook, hardened: str) -> None:
    asking = pod(hardened, SYNCED)
    asking["spec"]["hostUsers"] = True
    with pytest.raises(PermanentKubeError) as refused:
        webhook.kube.apply(asking, force=True)
    assert refused.value.status == 403
    assert "hostUsers: true" in refused.value.message


def test_a_pod_asking_for_no_seccomp_profile_is_refused(webhook: Webhook,
                                                         hardened: str) -> None:
    asking = pod(hardened, SYNCED)
    asking["spec"]["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}
    with pytest.raises(PermanentKubeError) as refused:
        webhook.kube.apply(asking, force=True)
    assert refused.value.status == 403 and "Unconfined" in refused.value.message


def test_pods_of_namespaces_without_hardening_keep_host_users(webhook: Webhook,
                                                               shared_pool: str) -> None:
    created = webhook.kube.apply(pod(shared_pool, SYNCED), force=True)
    assert "hostUsers" not in created["spec"]


def test_a_baseline_namespace_gives_pods_runtime_default_seccomp_but_not_user_namespaces(
        webhook: Webhook, baseline: str) -> None:
    created = webhook.kube.apply(_without_pod_seccomp(pod(baseline, SYNCED)), force=True)
    assert created["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostUsers" not in created["spec"]
    unconfined = pod(baseline, SYNCED)
    unconfined["spec"]["containers"][0]["securityContext"] = {
        "seccompProfile": {"type": "Unconfined"}}
    with pytest.raises(PermanentKubeError) as refused:
        webhook.kube.apply(unconfined, force=True)
    assert refused.value.status == 403 and "Unconfined" in refused.value.message


@pytest.fixture
def shared_gpu(webhook: Webhook) -> Iterator[str]:
    """A shared-pool cluster holding half of one H100 (issue 61)."""
    spec = ClusterSpec(tenant=_unique("sh"), name=RELEASE, kubernetes_version="1.32.4",
                       placement="shared-pool", gpu_class="NVIDIA-H100-80GB-HBM3", gpus=0,
                       cpu_millicores=1000, memory_mib=1024,
                       endpoint="https://train.acme.vc.example.com", gpu_unit="share",
                       amount=50)
    name = _created_namespace(webhook.kube, namespace(spec, ManifestPolicy()))
    try:
        _wait_until_mutating(webhook, name)
        yield name
    finally:
        webhook.kube.delete("v1", "Namespace", name)


def _sharing(namespace_name: str, fraction: str) -> Manifest:
    obj = pod(namespace_name, SYNCED)
    obj["metadata"]["annotations"] = {lbl.GPU_FRACTION: fraction}
    return obj


def test_a_pod_asking_for_a_share_lands_with_kais_sharing_configmaps(
        webhook: Webhook, shared_gpu: str) -> None:
    created = webhook.kube.apply(_sharing(shared_gpu, "0.25"), force=True)
    prefix = created["metadata"]["annotations"][lbl.SHARED_GPU_CONFIGMAP]
    assert prefix.startswith(created["metadata"]["name"] + "-")
    assert prefix.endswith("-shared-gpu")
    container = created["spec"]["containers"][0]
    assert {e["name"]: e["valueFrom"]["configMapKeyRef"] for e in container["env"]} == {
        name: {"name": f"{prefix}-0", "key": name}
        for name in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")}
    assert container["envFrom"] == [{"configMapRef": {"name": f"{prefix}-0-evar",
                                                      "optional": False}}]
    volume = next(v for v in created["spec"]["volumes"] if v["name"] == f"{prefix}-0-vol")
    assert volume["configMap"]["name"] == f"{prefix}-0"
    # The syncer's later updates go through, and change none of it.
    updated = _update_labels(webhook, created, {**SYNCED, "app": "v2"})
    assert updated["spec"] == created["spec"]
    assert updated["metadata"]["annotations"] == created["metadata"]["annotations"]


def test_a_pod_asking_for_more_than_the_clusters_share_is_refused_in_words(
        webhook: Webhook, shared_gpu: str) -> None:
    with pytest.raises(PermanentKubeError) as refused:
        webhook.kube.apply(_sharing(shared_gpu, "0.75"), force=True)
    assert refused.value.status == 403
    assert "this pod asks 0.75 of one H100 80GB HBM3, the cluster holds 0.5" in (
        refused.value.message)
    obj = pod(shared_gpu, SYNCED)
    obj["spec"]["containers"][0]["resources"] = {"limits": {lbl.GPU_RESOURCE: "1"}}
    with pytest.raises(PermanentKubeError) as whole:
        webhook.kube.apply(obj, force=True)
    assert "ask with the annotation gpu-fraction" in whole.value.message
