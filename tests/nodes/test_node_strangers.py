"""A node dedicated to a tenant while other tenants' pods run on it: the worker evicts them,
keeps the tenant's own dedicated clusters' pods and never touches the host's own."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.kube.manifests import labels as lbl
from app.reconcilers.node_strangers import strangers
from tests.nodes.conftest import Synced
from tests.nodes.test_reconciler import _assign
from tests.support.drive import run_due


def tenant_namespace(name: str, tenant: str, placement: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
        lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE, lbl.TENANT: tenant, lbl.PLACEMENT: placement}}}


def bound_pod(namespace: str, name: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}}


NAMESPACES = {
    "t-acme--train": tenant_namespace("t-acme--train", "acme", "shared-pool")["metadata"]["labels"],
    "t-acme--own": tenant_namespace("t-acme--own", "acme", "dedicated-nodes")["metadata"]["labels"],
    "t-initech--big": tenant_namespace("t-initech--big", "initech",
                                       "dedicated-nodes")["metadata"]["labels"],
    "kube-system": {},
}


def test_only_the_dedicated_tenants_own_dedicated_pods_are_not_strangers() -> None:
    pods = [bound_pod(ns, f"p-{ns}", "n1") for ns in NAMESPACES]
    assert strangers(pods, NAMESPACES, "acme") == [("t-acme--train", "p-t-acme--train"),
                                                   ("t-initech--big", "p-t-initech--big")]
    # Its own shared-pool pods too: the shared pool has no dedicated node.
    assert ("t-acme--train", "p-t-acme--train") in strangers(pods, NAMESPACES, "initech")
    assert strangers(pods, {}, "acme") == []


def test_dedicating_a_node_evicts_other_tenants_pods_bound_there(
        synced: Synced, db: Session) -> None:
    node = "h100-r1-n4"
    for name, labels in NAMESPACES.items():
        synced.kube.seed({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": name, "labels": dict(labels)}})
        synced.kube.seed(bound_pod(name, "p1", node))
    synced.kube.seed(bound_pod("t-acme--train", "elsewhere", "h100-r1-n1"))
    _assign(db, node, "initech")
    assert run_due(synced.reconciler, "test") == 1
    left = {(p["metadata"]["namespace"], p["metadata"]["name"])
            for p in synced.kube.list("v1", "Pod")}
    assert left == {("t-initech--big", "p1"), ("kube-system", "p1"),
                    ("t-acme--train", "elsewhere")}
    synced.kube.reset_calls()
    assert synced.resync() == 1
    assert synced.kube.writes() == [] and synced.kube.mutations() == []
