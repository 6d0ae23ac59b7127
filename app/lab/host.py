"""What the lab puts on its host before the portal arrives: the GPU fleet of a NodeList, for
kwok to keep, and the portal's own RBAC from the Kustomize base, for the portal to act under."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from app.kube.adapter import KubernetesAdapter
from app.kube.port import Manifest
from app.lab.gpu import KWOK_NODE

PORTAL_NAMESPACE = "gpu-tenant-portal"
# The base's files that hold the portal's identities and rights, and the policy that bounds
# the worker's writes in kube-system (not its Deployments: the lab runs the portal as
# processes).
RBAC_FILES = ("namespace.yaml", "serviceaccounts.yaml", "rbac-worker.yaml", "rbac-webhook.yaml",
              "admission-worker.yaml")
WORKER_ACCOUNT = "gpu-tenant-portal-worker"
WEBHOOK_ACCOUNT = "gpu-tenant-portal-webhook"
MACHINES = "lab-machines"
_NAMESPACED = {"ServiceAccount", "Role", "RoleBinding"}
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def fleet_nodes(node_list: Path) -> list[Manifest]:
    """The NodeList's nodes as new objects: kwok keeps the Ready ones (their conditions are its
    to write: it starts nodes without a Ready one); a NotReady machine is left to itself (the
    node controller marks it unreachable, as it would a dead kubelet)."""
    return [_as_new_node(node) for node in json.loads(node_list.read_text())["items"]]


def _as_new_node(node: Manifest) -> Manifest:
    meta = {k: v for k, v in node["metadata"].items() if k not in _SERVER_SET}
    status = dict(node.get("status") or {})
    if _is_ready(node):
        meta["annotations"] = {**meta.get("annotations", {}), **KWOK_NODE}
        status.pop("conditions", None)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "spec": node.get("spec") or {}, "status": status}


def _is_ready(node: Manifest) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def add_fleet(host: KubernetesAdapter, nodes: list[Manifest]) -> None:
    """As the machines' kubelets and GPU Feature Discovery would: under a field manager of
    their own, so that the portal's labels and taints leave theirs alone."""
    for node in nodes:
        host.apply({k: v for k, v in node.items() if k != "status"}, force=True,
                   manager=MACHINES)
        host.apply_status({"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": node["metadata"]["name"]},
                           "status": node["status"]}, manager=MACHINES)


def portal_rbac(base: Path) -> list[Manifest]:
    """The base's Namespaces, ServiceAccounts, roles and bindings, in the portal's namespace as
    Kustomize puts them (a Role of the worker's that names its namespace, such as kube-system,
    stays there)."""
    objects: list[Manifest] = []
    for name in RBAC_FILES:
        for doc in yaml.safe_load_all((base / name).read_text()):
            if doc:
                objects.append(_in_namespace(doc))
    return objects


def _in_namespace(doc: dict[str, Any]) -> Manifest:
    if doc["kind"] in _NAMESPACED:
        doc["metadata"].setdefault("namespace", PORTAL_NAMESPACE)
    for subject in doc.get("subjects") or []:
        if subject.get("kind") == "ServiceAccount":
            subject["namespace"] = PORTAL_NAMESPACE
    return doc
