"""Fixtures for the deployment manifests' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.kube.adapter import KubernetesAdapter
from tests.deploy.kustomize import NAMESPACE


@pytest.fixture(scope="session")
def portal_namespace(host_admin: KubernetesAdapter) -> Iterator[str]:
    """The portal's namespace on the host, as the base makes it. Other tests of the run (the
    webhook's) use the same name, so one that was there is left as it was; made here, it
    stays for the run (deleting takes the controller-manager a while)."""
    existed = host_admin.get("v1", "Namespace", NAMESPACE) is not None
    if not existed:
        host_admin.apply({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": NAMESPACE}})
    yield NAMESPACE
    if not existed:
        host_admin.delete("v1", "Namespace", NAMESPACE)
