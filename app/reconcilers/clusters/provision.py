"""An awake cluster, top to bottom: its host objects, its release (helm), its API server
answering, then its add-ons."""

from __future__ import annotations

import base64
import binascii

from app.clusters import conditions as cond
from app.clusters import desired
from app.kit.crypto import SecretBox
from app.kube import manifests
from app.kube.errors import KubeError
from app.kube.helm import InstallError
from app.kube.manifests import InvalidSpec
from app.kube.port import Manifest
from app.reconcilers.clusters import addons, host_objects, private_nodes, sleeping
from app.reconcilers.clusters.results import Pass
from app.reconcilers.clusters.scope import ClusterScope


def provision(scope: ClusterScope) -> Pass:
    _admission(scope)
    failed = host_objects.apply(scope)
    if failed is not None:
        return failed
    try:
        if scope.wanted.slept:
            sleeping.wake(scope)
        reason, message, secret = _release(scope)
    except (KubeError, InstallError, InvalidSpec) as error:
        return scope.failed(cond.RELEASE_INSTALLED, error)
    scope.set(cond.RELEASE_INSTALLED, True, reason, message)
    try:
        outcome = _ready(scope, secret)
    except KubeError as error:
        return scope.failed(cond.READY, error)
    if not outcome.converged:
        return outcome
    sleeping.woke(scope)
    return private_nodes.converge(scope, addons.converge(scope, outcome))


def _admission(scope: ClusterScope) -> None:
    """Shared-pool pods on the open-source vCluster get their KAI queue from the portal's
    webhook, and a hardened cluster's pods their hardening; where the host's API server has
    no way to it, the queue guard and the hardening guard refuse such pods (they never run
    outside the queue, nor unhardened): the cluster says so until the host gets a URL."""
    spec = scope.wanted.spec
    shared = spec.placement == "shared-pool" and scope.deps.settings.vcluster_edition == "oss"
    hardened = manifests.hardening_level(spec.pod_security, spec.user_namespaces)
    if (shared or hardened) and not scope.where.webhook:
        scope.set(cond.POD_ADMISSION, False, cond.NO_WEBHOOK_URL,
                  cond.no_webhook_message(scope.where.name, shared, hardened))
    elif cond.find(scope.conditions, cond.POD_ADMISSION) is not None:
        scope.set(cond.POD_ADMISSION, True, "WebhookURLSet",
                  f"host cluster {scope.where.name} calls the portal's admission webhook")


def _release(scope: ClusterScope) -> tuple[str, str, Manifest | None]:
    """helm installs the release when its values changed or it vanished; (reason, message,
    the chart's kubeconfig Secret)."""
    wanted, settings = scope.wanted, scope.deps.settings
    digest = desired.release_digest(wanted, settings)
    message = (f"release {wanted.release} of chart vcluster "
               f"{settings.vcluster_chart_version} (values {digest})")
    secret = _kubeconfig_secret(scope)
    current = cond.find(scope.conditions, cond.RELEASE_INSTALLED)
    up_to_date = current is not None and current.get("status") == "True" and (
        current.get("message") == message)
    # A release that was ready and lost its Secret was removed behind our back.
    vanished = secret is None and cond.is_true(scope.conditions, cond.READY)
    if up_to_date and not vanished:
        return "Installed", message, secret
    scope.reinstalled = vanished
    # However long helm takes, the heartbeat keeps the lease; the tenant sees the steps so far
    # meanwhile.
    scope.check_lease()
    scope.save_conditions()
    scope.where.installer.install(wanted.release, wanted.namespace, wanted.values_yaml())
    scope.check_lease()
    return "Installed", message, _kubeconfig_secret(scope)


def _kubeconfig_secret(scope: ClusterScope) -> Manifest | None:
    wanted = scope.wanted
    return scope.host.get("v1", "Secret", wanted.kubeconfig_secret, wanted.namespace)


def _ready(scope: ClusterScope, secret: Manifest | None) -> Pass:
    wait = Pass(next_in=scope.deps.wait_seconds)
    name = f"Secret {scope.wanted.kubeconfig_secret} in {scope.wanted.namespace}"
    config = _kubeconfig_of(secret) if secret is not None else None
    if config is None:
        scope.set(cond.READY, False, "WaitingForControlPlane", f"waiting for {name}")
        return wait
    if not scope.deps.connector.ready(config):
        scope.set(cond.READY, False, "APIServerNotReady",
                  "the virtual cluster's API server does not answer /readyz yet")
        return wait
    _store_credential(scope, config)
    scope.kubeconfig = config
    scope.set(cond.READY, True, "ClusterReady", "the API server answers /readyz")
    if cond.find(scope.conditions, cond.FAILED) is not None:
        scope.set(cond.FAILED, False, "Reconciled", "")
    return Pass(converged=True)


def _store_credential(scope: ClusterScope, config: str) -> None:
    sealed = scope.wanted.sealed_kubeconfig
    box = scope.deps.box
    if sealed is not None and _opens_to(box, sealed, config):
        return
    with scope.deps.database.transaction() as db:
        scope.write(db, admin_kubeconfig_encrypted=box.seal(config),
                    **scope.unsaved_conditions())
        scope.audit(db, "virtual_cluster.credential_stored", None,
                    {"credential": "admin kubeconfig stored encrypted"})
    scope.unsaved = None


def _kubeconfig_of(secret: Manifest) -> str | None:
    encoded = (secret.get("data") or {}).get("config")
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def _opens_to(box: SecretBox, sealed: str, plaintext: str) -> bool:
    try:
        return box.open(sealed) == plaintext
    except ValueError:
        return False
