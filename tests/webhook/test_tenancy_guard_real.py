"""The tenancy guards on a real kube-apiserver, with no webhook in front of them: whatever spec a
tenant's virtual cluster syncs, the host refuses every pod reaching for a node dedicated to
another tenant, admits a dedicated cluster's pods on its own nodes, and agrees with the webhook's
own refusals pod for pod."""

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
from app.kube.errors import KubeError
from app.kube.manifests import ClusterSpec, ManifestPolicy, namespace
from app.kube.manifests import labels as lbl
from app.kube.manifests.nodes import node_tenant_patch
from app.kube.manifests.tenancy import tenancy_objects
from app.kube.port import Manifest
from app.webhook.placement import placement_refusal
from tests.support.kube_server import ApiServer
from tests.support.waiting import wait_for
from tests.webhook.test_placement import ATTACKS, OWN_TOLERATION, affinity, spec_with

pytestmark = pytest.mark.kube_server
k8s_config: Any = _k8s_config  # untyped loaders
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True, "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"}}


@dataclass(frozen=True)
class Tenancy:
    kube: KubernetesAdapter
    core: Any
    acme: str  # the tenant whose pods attack
    shared: str  # acme's shared-pool namespace
    dedicated: str  # acme's dedicated-nodes namespace
    own_node: str  # dedicated to acme
    foreign_node: str  # dedicated to another tenant
    pool_node: str  # in the shared pool


@pytest.fixture(scope="module")
def tenancy(bare_api: ApiServer) -> Iterator[Tenancy]:
    kube = bare_api.adapter()
    api_client = k8s_config.new_client_from_config_dict(yaml.safe_load(bare_api.admin_kubeconfig))
    suffix = uuid.uuid4().hex[:6]
    acme, initech = f"acme{suffix}", f"initech{suffix}"
    nodes: dict[str, str | None] = {f"own-{suffix}": acme, f"foreign-{suffix}": initech,
                                    f"pool-{suffix}": None}
    guard = tenancy_objects()
    namespaces = [_namespace(kube, acme, "shared-pool"), _namespace(kube, acme, "dedicated-nodes")]
    try:
        for name, tenant in nodes.items():
            kube.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}},
                       force=True)
            kube.apply(node_tenant_patch(name, tenant, []), force=True)
        for obj in guard:
            kube.apply(obj, force=True)
        yield Tenancy(kube, k8s_client.CoreV1Api(api_client), acme, *namespaces, *nodes)
    finally:
        for obj in reversed(guard):
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        for each in [*namespaces]:
            kube.delete("v1", "Namespace", each)
        for name in nodes:
            kube.delete("v1", "Node", name)
        api_client.close()
        kube.close()


def _namespace(kube: KubernetesAdapter, tenant: str, placement: Any) -> str:
    spec = ClusterSpec(tenant=tenant, name="train", kubernetes_version="1.32.4",
                       placement=placement, gpu_class="NVIDIA-H100-80GB-HBM3", gpus=1,
                       cpu_millicores=1000, memory_mib=1024,
                       endpoint="https://train.acme.vc.example.com")
    manifest = namespace(spec, ManifestPolicy())
    name = f"{manifest['metadata']['name']}-{placement}"
    manifest["metadata"]["name"] = name
    kube.apply(manifest, force=True)
    # No controller-manager here: the ServiceAccount admission plugin needs "default".
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": name}}, force=True)
    return name


def _pod(namespace_name: str, spec: dict[str, Any]) -> Manifest:
    body = json.loads(json.dumps(spec))
    for container in body["spec"]["containers"]:
        container["securityContext"] = dict(RESTRICTED_CONTAINER)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{uuid.uuid4().hex[:8]}", "namespace": namespace_name,
                         **body["metadata"]},
            "spec": body["spec"]}


def _refusal(t: Tenancy, namespace_name: str, spec: dict[str, Any]) -> str | None:
    """None when a dry-run create is admitted, else the API server's message."""
    try:
        t.core.create_namespaced_pod(namespace_name, _pod(namespace_name, spec), dry_run="All",
                                     _preload_content=False)
    except k8s_client.ApiException as error:
        return str(json.loads(error.body or "{}").get("message", ""))
    return None


def _names(node: str) -> dict[str, dict[str, Any]]:
    """Every way a pod can name one node."""
    field = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    return {
        "nodeName": spec_with(nodeName=node),
        "hostname selector": spec_with(nodeSelector={lbl.HOSTNAME: node}),
        "hostname affinity": spec_with(affinity=affinity(
            {"key": lbl.HOSTNAME, "operator": "In", "values": [node]})),
        "daemonset-style field affinity": spec_with(affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": field}}),
    }


def _effective(t: Tenancy) -> None:
    # The API server loads policies and their parameters asynchronously.
    wait_for(lambda: _refusal(t, t.shared, ATTACKS["blanket toleration"]) is not None,
             "the tenancy guard to take effect")
    wait_for(lambda: _refusal(t, t.dedicated, spec_with(nodeName=t.foreign_node)) is not None,
             "the dedicated-node guard to see its nodes")


def test_the_host_refuses_what_the_webhook_refuses_and_admits_what_it_admits(
        tenancy: Tenancy) -> None:
    t = tenancy
    _effective(t)
    own = spec_with(tolerations=[{**OWN_TOLERATION, "value": t.acme}],
                    nodeSelector={lbl.TENANT: t.acme})
    pods = {**ATTACKS, "own toleration and selector": own, "plain": spec_with()}
    for namespace_name in (t.shared, t.dedicated):
        labels = t.kube.get("v1", "Namespace", namespace_name)["metadata"]["labels"]  # type: ignore[index]
        for name, spec in pods.items():
            webhook = placement_refusal(spec, labels, "CREATE")
            host = _refusal(t, namespace_name, spec)
            assert (host is None) == (webhook is None), (namespace_name, name, host, webhook)
    assert _refusal(t, t.shared, own) is not None
    assert _refusal(t, t.dedicated, own) is None


def test_no_pod_names_a_node_dedicated_to_another_tenant(tenancy: Tenancy) -> None:
    t = tenancy
    _effective(t)
    for way, spec in _names(t.foreign_node).items():
        for namespace_name in (t.shared, t.dedicated):
            refused = _refusal(t, namespace_name, spec)
            assert refused is not None, (way, namespace_name)
    for way, spec in _names(t.own_node).items():
        # A dedicated cluster's pods go to its own nodes; the shared pool's never do.
        assert _refusal(t, t.dedicated, spec) is None, way
        assert _refusal(t, t.shared, spec) is not None, way
    # A node dedicated to nobody: the shared pool's (by selector), never a dedicated cluster's.
    for way, spec in _names(t.pool_node).items():
        if way != "nodeName":  # a shared-pool pod names no node at all (the tenancy guard)
            assert _refusal(t, t.shared, spec) is None, way
        assert _refusal(t, t.dedicated, spec) is not None, way


def _create_refusal(t: Tenancy, obj: Manifest) -> str | None:
    try:
        t.kube.dry_run_apply(obj)
    except KubeError as error:
        return error.message
    return None


def test_synced_endpoints_may_not_aim_at_the_cluster_own_addresses(tenancy: Tenancy) -> None:
    t = tenancy

    def endpoints(address: str, synced: bool = True) -> Manifest:
        labels = {lbl.VCLUSTER_SYNCED_MARKER: "train"} if synced else {}
        return {"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": f"e-{uuid.uuid4().hex[:6]}", "namespace": t.shared,
                             "labels": labels},
                "subsets": [{"addresses": [{"ip": address}], "ports": [{"port": 443}]}]}

    def endpoint_slice(address: str) -> Manifest:
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": f"s-{uuid.uuid4().hex[:6]}", "namespace": t.dedicated,
                             "labels": {lbl.VCLUSTER_SYNCED_MARKER: "train"}},
                "addressType": "IPv4", "ports": [{"port": 443}],
                "endpoints": [{"addresses": [address]}]}

    wait_for(lambda: _create_refusal(t, endpoints("10.214.0.1")) is not None,
             "the endpoints guard to take effect")
    for internal in ("10.214.0.1", "172.16.3.4", "192.168.1.1", "127.0.0.1", "169.254.169.254"):
        assert _create_refusal(t, endpoints(internal)) is not None, internal
        assert _create_refusal(t, endpoint_slice(internal)) is not None, internal
    assert _create_refusal(t, endpoints("203.0.113.10")) is None  # an external service
    assert _create_refusal(t, endpoint_slice("203.0.113.10")) is None
    assert _create_refusal(t, endpoints("10.214.0.1", synced=False)) is None  # the host's own
