"""The adapter's classification of what a real kube-apiserver refuses."""

from __future__ import annotations

import secrets
import time

import pytest

from app.kube.errors import PermanentKubeError, TransientKubeError
from app.kube.port import Manifest
from tests.support.kube_server import ApiServer
from tests.support.kubectl import Kubectl

pytestmark = pytest.mark.kube_server


def config_map(namespace: str, name: str, *finalizers: str) -> Manifest:
    metadata: Manifest = {"name": name, "namespace": namespace}
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


def test_writing_into_a_terminating_namespace_is_transient(
    host_api: ApiServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    adapter = host_api.adapter()
    kubectl = Kubectl(host_api, tmp_path_factory.mktemp("kubectl"))
    namespace = f"terminating-{secrets.token_hex(3)}"
    adapter.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    kubectl.create(config_map(namespace, "held", "example.com/hold"))  # holds it Terminating
    try:
        assert adapter.delete("v1", "Namespace", namespace)
        with pytest.raises(TransientKubeError) as refused:
            adapter.apply(config_map(namespace, "late"))
        assert (refused.value.reason, refused.value.status) == ("NamespaceTerminating", 403)
        # other refusals stay permanent
        with pytest.raises(PermanentKubeError):
            adapter.apply(config_map("no-such-namespace", "late"))
    finally:
        kubectl.merge_patch("v1", "ConfigMap", "held", namespace,
                            {"metadata": {"finalizers": None}})
        deadline = time.monotonic() + 30
        while adapter.get("v1", "Namespace", namespace) is not None:
            assert time.monotonic() < deadline, "the namespace did not go"
            time.sleep(0.2)
        kubectl.close()
        adapter.close()
