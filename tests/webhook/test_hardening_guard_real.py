"""The hardening guard on a real kube-apiserver with no admission webhook registered, as on a
host whose API server cannot reach it: a synced pod in a hardened namespace that does not set
its hardening itself is refused, never run unhardened; one that sets it is admitted, and so are
pods the syncer did not write (the vCluster control plane)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import ClusterSpec, ManifestPolicy, namespace
from app.kube.manifests import labels as lbl
from app.kube.manifests.admission import hardening_guard_binding, hardening_guard_policy
from app.kube.port import Manifest
from tests.support.kube_server import ApiServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kube_server
k8s_config: Any = _k8s_config  # untyped loaders
SYNCED = {lbl.VCLUSTER_SYNCED_MARKER: "train"}
# Pod Security baseline allows this; only the seccomp profile is left out.
PLAIN = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
         "runAsNonRoot": True, "runAsUser": 65532}


@pytest.fixture(scope="module")
def guarded(bare_api: ApiServer) -> Iterator[tuple[KubernetesAdapter, Any]]:
    """The guard on the bare API server (taken away again after), and a client for dry runs."""
    kube = bare_api.adapter()
    guard = [hardening_guard_policy(), hardening_guard_binding()]
    api_client = k8s_config.new_client_from_config_dict(yaml.safe_load(bare_api.admin_kubeconfig))
    try:
        for obj in guard:
            kube.apply(obj, force=True)
        yield kube, k8s_client.CoreV1Api(api_client)
    finally:
        for obj in reversed(guard):
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        api_client.close()
        kube.close()


def _namespace(kube: KubernetesAdapter, **hardening: Any) -> str:
    spec = ClusterSpec(tenant=f"hg{uuid.uuid4().hex[:8]}", name="train",
                       kubernetes_version="1.32.4", placement="dedicated-nodes", gpu_class=None,
                       gpus=0, cpu_millicores=1000, memory_mib=1024,
                       endpoint="https://train.acme.vc.example.com", **hardening)
    manifest = namespace(spec, ManifestPolicy())
    name = str(manifest["metadata"]["name"])
    kube.apply(manifest, force=True)
    # No controller-manager here: the ServiceAccount admission plugin needs "default".
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": name}}, force=True)
    return name


def _pod(namespace_name: str, *, labels: dict[str, str] | None = None,
         pod_seccomp: str | None = None, container_seccomp: str | None = None,
         host_users: bool | None = None) -> Manifest:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "securityContext": dict(PLAIN)}
    if container_seccomp:
        container["securityContext"]["seccompProfile"] = {"type": container_seccomp}
    spec: dict[str, Any] = {"containers": [container]}
    if pod_seccomp:
        spec["securityContext"] = {"seccompProfile": {"type": pod_seccomp}}
    if host_users is not None:
        spec["hostUsers"] = host_users
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{uuid.uuid4().hex[:8]}", "namespace": namespace_name,
                         "labels": SYNCED if labels is None else labels},
            "spec": spec}


def _refusal(core: Any, pod: Manifest) -> str | None:
    """None when a dry-run create is admitted, else the API server's message."""
    try:
        core.create_namespaced_pod(pod["metadata"]["namespace"], pod, dry_run="All",
                                   _preload_content=False)
    except k8s_client.ApiException as error:
        return str(json.loads(error.body or "{}").get("message", ""))
    return None


def test_a_synced_pod_without_a_seccomp_profile_is_refused_in_a_baseline_namespace(
        guarded: tuple[KubernetesAdapter, Any]) -> None:
    kube, core = guarded
    name = _namespace(kube, pod_security="baseline")
    try:
        # The API server loads policies asynchronously: wait until this one refuses.
        wait_for(lambda: _refusal(core, _pod(name)) is not None, "the guard to take effect")
        refused = _refusal(core, _pod(name))
        assert refused is not None
        assert "seccomp profile" in refused and "webhook" in refused
        assert _refusal(core, _pod(name, pod_seccomp="Unconfined")) is not None
        assert _refusal(core, _pod(name, pod_seccomp="RuntimeDefault",
                                   container_seccomp="Unconfined")) is not None
        assert _refusal(core, _pod(name, pod_seccomp="RuntimeDefault")) is None
        assert _refusal(core, _pod(name, container_seccomp="RuntimeDefault")) is None
        assert _refusal(core, _pod(name, labels={})) is None  # not synced: not guarded
    finally:
        kube.delete("v1", "Namespace", name)


def test_a_synced_pod_on_host_users_is_refused_in_a_user_namespaces_namespace(
        guarded: tuple[KubernetesAdapter, Any]) -> None:
    kube, core = guarded
    name = _namespace(kube, pod_security="baseline", user_namespaces=True)
    plain = _namespace(kube, pod_security="baseline")
    restricted = _namespace(kube)
    try:
        wait_for(lambda: _refusal(core, _pod(name, pod_seccomp="RuntimeDefault")) is not None,
              "the guard to take effect")
        refused = _refusal(core, _pod(name, pod_seccomp="RuntimeDefault"))
        assert refused is not None and "hostUsers: false" in refused
        assert _refusal(core, _pod(name, pod_seccomp="RuntimeDefault", host_users=True))
        assert _refusal(core, _pod(name, pod_seccomp="RuntimeDefault", host_users=False)) is None
        # The seccomp level asks nothing of hostUsers; an unhardened namespace nothing at all
        # (Pod Security restricted refuses a pod without a profile there on its own).
        assert _refusal(core, _pod(plain, pod_seccomp="RuntimeDefault")) is None
        assert _refusal(core, _pod(restricted, pod_seccomp="RuntimeDefault")) is None
    finally:
        for each in (name, plain, restricted):
            kube.delete("v1", "Namespace", each)
