"""The tenancy guard's GPU unit rules on a real kube-apiserver with no webhook in front: for
namespaces of whole GPUs, MIG slices and shares of one GPU, the host refuses exactly the pods
the webhook refuses (gpu_asks.py), per-pod share ceilings included (one pod's slices are the
ResourceQuota's to count), and on UPDATE a pod's share ask stays what it was made with."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as _k8s_config

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import ClusterSpec, ManifestPolicy, namespace
from app.kube.manifests import labels as lbl
from app.kube.manifests.tenancy import tenancy_objects
from app.kube.port import Manifest
from app.webhook.gpu_asks import gpu_ask_refusal
from tests.support.kube_server import ApiServer
from tests.support.waiting import wait_for
from tests.webhook.support import RESTRICTED

pytestmark = pytest.mark.kube_server
k8s_config: Any = _k8s_config  # untyped loaders
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
UNITS: dict[str, dict[str, Any]] = {
    "whole": {"gpus": 2},
    "mig": {"gpu_class": A100, "gpu_unit": "mig", "mig_profile": "1g.10gb", "amount": 3},
    "half": {"gpu_unit": "share", "amount": 50},
    "one": {"gpu_unit": "share", "amount": 100},
    "tiny": {"gpu_unit": "share", "amount": 7},
}
FRACTIONS = ("0", "0.00", "1.5", "-0.5", "0.125", "half", "5e-1", "", " 0.5", "01", ".5",
             "0.50", "0.51", "0.25", "0.07", "0.08", "1", "1.0")


@dataclass(frozen=True)
class Guarded:
    kube: KubernetesAdapter
    core: Any
    namespaces: dict[str, str]  # unit case -> namespace


@pytest.fixture(scope="module")
def guarded(bare_api: ApiServer) -> Iterator[Guarded]:
    kube = bare_api.adapter()
    api_client = k8s_config.new_client_from_config_dict(yaml.safe_load(bare_api.admin_kubeconfig))
    tenant = f"units{uuid.uuid4().hex[:6]}"
    guard = tenancy_objects()
    namespaces = {case: _namespace(kube, tenant, case) for case in UNITS}
    try:
        for obj in guard:
            kube.apply(obj, force=True)
        yield Guarded(kube, k8s_client.CoreV1Api(api_client), namespaces)
    finally:
        for obj in reversed(guard):
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        for name in namespaces.values():
            kube.delete("v1", "Namespace", name)
        api_client.close()
        kube.close()


def _namespace(kube: KubernetesAdapter, tenant: str, case: str) -> str:
    fields: dict[str, Any] = {"gpu_class": H100, "gpus": 0, **UNITS[case]}
    spec = ClusterSpec(tenant=tenant, name=case, kubernetes_version="1.32.4",
                       placement="shared-pool", cpu_millicores=1000, memory_mib=1024,
                       endpoint="https://train.acme.vc.example.com", **fields)
    manifest = namespace(spec, ManifestPolicy())
    name = str(manifest["metadata"]["name"])
    kube.apply(manifest, force=True)
    # No controller-manager here: the ServiceAccount admission plugin needs "default".
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": name}}, force=True)
    return name


def _pod(namespace_name: str, annotations: dict[str, str] | None = None,
         limits: dict[str, str] | None = None) -> Manifest:
    container: dict[str, Any] = {"name": "main", "image": "busybox",
                                 "securityContext": dict(RESTRICTED)}
    if limits:
        container["resources"] = {"limits": limits}
    metadata: dict[str, Any] = {"name": f"p-{uuid.uuid4().hex[:8]}", "namespace": namespace_name,
                                "labels": {lbl.VCLUSTER_SYNCED_MARKER: "train",
                                           # the queue guard is not installed here
                                           lbl.KAI_QUEUE_LABEL: "q"}}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [container]}}


def _refusal(g: Guarded, pod: Manifest) -> str | None:
    """None when a dry-run create is admitted, else the API server's message."""
    try:
        g.core.create_namespaced_pod(pod["metadata"]["namespace"], pod, dry_run="All",
                                     _preload_content=False)
    except k8s_client.ApiException as error:
        return str(json.loads(error.body or "{}").get("message", ""))
    return None


def _asks() -> dict[str, tuple[dict[str, str] | None, dict[str, str] | None]]:
    """(annotations, limits) of every kind of GPU ask."""
    asks: dict[str, tuple[dict[str, str] | None, dict[str, str] | None]] = {
        "nothing": (None, None),
        "whole": (None, {"nvidia.com/gpu": "1"}),
        "own slices": (None, {"nvidia.com/mig-1g.10gb": "2"}),
        "too many slices": (None, {"nvidia.com/mig-1g.10gb": "4"}),
        "other profile": (None, {"nvidia.com/mig-3g.40gb": "1"}),
        "memory": ({"gpu-memory": "4096"}, None),
        "devices": ({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}, None),
        "devices alone": ({"gpu-fraction-num-devices": "2"}, None),
        "another annotation": ({"team": "a"}, None),
    }
    asks.update({f"fraction {text!r}": ({"gpu-fraction": text}, None) for text in FRACTIONS})
    return asks


def _effective(g: Guarded) -> None:
    # The API server loads policies asynchronously.
    wait_for(lambda: _refusal(g, _pod(g.namespaces["whole"], {"gpu-fraction": "0.5"}))
             is not None, "the tenancy guard to take effect")


def test_the_host_refuses_the_gpu_asks_the_webhook_refuses(guarded: Guarded) -> None:
    g = guarded
    _effective(g)
    disagreements = []
    for case, namespace_name in g.namespaces.items():
        stored = g.kube.get("v1", "Namespace", namespace_name)
        assert stored is not None
        labels = stored["metadata"]["labels"]
        for ask, (notes, limits) in _asks().items():
            pod = _pod(namespace_name, notes, limits)
            webhook = gpu_ask_refusal(pod, None, labels, "CREATE")
            host = _refusal(g, pod)
            if (host is None) != (webhook is None):
                disagreements.append((case, ask, host, webhook))
    # Counting slices is left to the namespace's ResourceQuota on the host (none here).
    assert [(case, ask) for case, ask, *_ in disagreements] == [("mig", "too many slices")]
    # Not every pod is refused: a guard that refused all would agree on nothing above.
    assert _refusal(g, _pod(g.namespaces["tiny"], {"gpu-fraction": "0.07"})) is None
    assert "share" in (_refusal(g, _pod(g.namespaces["tiny"], {"gpu-fraction": "0.08"})) or "")


def test_a_pods_share_ask_stays_what_it_was_made_with(guarded: Guarded) -> None:
    g = guarded
    _effective(g)
    namespace_name = g.namespaces["half"]
    pod = _pod(namespace_name, {"gpu-fraction": "0.25"})
    name = pod["metadata"]["name"]
    g.core.create_namespaced_pod(namespace_name, pod)
    try:
        with pytest.raises(k8s_client.ApiException, match="cannot change once it is made"):
            g.core.patch_namespaced_pod(name, namespace_name, {
                "metadata": {"annotations": {"gpu-fraction": "0.5"}}})
        with pytest.raises(k8s_client.ApiException, match="cannot change once it is made"):
            g.core.patch_namespaced_pod(name, namespace_name, {
                "metadata": {"annotations": {"gpu-fraction": None}}})
        # What the syncer changes on a running pod still goes through.
        g.core.patch_namespaced_pod(name, namespace_name, {
            "metadata": {"annotations": {"synced": "again"}}})
    finally:
        g.core.delete_namespaced_pod(name, namespace_name, grace_period_seconds=0)
