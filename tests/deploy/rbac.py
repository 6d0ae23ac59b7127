"""The worker's RBAC as the Kustomize base grants it, applied to a real API server for one
ServiceAccount of a test's own: the worker's rights, and nothing more, for the tests that act as
the worker (its reconcilers, and helm with the real vCluster chart)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.kube.adapter import KubernetesAdapter
from app.kube.port import Manifest, ObjectRef
from tests.deploy.kustomize import WORKER, WORKER_HELM, find

# (API group, resource, verb)
Pair = tuple[str, str, str]


def pairs(role: Mapping[str, Any]) -> set[Pair]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def without(role: Manifest, missing: Pair | None) -> Manifest:
    """The role with one (group, resource, verb) taken out of every rule that grants it."""
    if missing is None:
        return role
    group, resource, verb = missing
    rules = []
    for rule in role["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            rest = [r for r in rule["resources"] if r != resource]
            if rest:
                rules.append({**rule, "resources": rest})
            verbs = [v for v in rule["verbs"] if v != verb]
            if verbs:
                rules.append({**rule, "resources": [resource], "verbs": verbs})
        else:
            rules.append(rule)
    return {**role, "rules": rules}


@dataclass
class Grant:
    """The base's worker RBAC, applied under names of its own for one ServiceAccount."""

    admin: KubernetesAdapter
    namespace: str
    account: str
    objects: list[Manifest] = field(default_factory=list)

    def apply(self, base: list[Manifest], missing: Pair | None) -> None:
        renamed = {WORKER: self.account, WORKER_HELM: f"{self.account}-helm"}
        self.objects.append({"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": self.account, "namespace": self.namespace}})
        for kind, name in (("ClusterRole", WORKER), ("ClusterRole", WORKER_HELM),
                           ("Role", WORKER)):
            role = without(find(base, kind, name), missing if name == WORKER else None)
            self.objects.append({**role, "metadata": {
                **role["metadata"], "name": renamed[name]}})
        for kind, name in (("ClusterRoleBinding", WORKER), ("ClusterRoleBinding", WORKER_HELM),
                           ("RoleBinding", WORKER)):
            binding = find(base, kind, name)
            self.objects.append({
                **binding, "metadata": {**binding["metadata"], "name": renamed[name]},
                "roleRef": {**binding["roleRef"], "name": renamed[binding["roleRef"]["name"]]},
                "subjects": [{"kind": "ServiceAccount", "name": self.account,
                              "namespace": self.namespace}]})
        for obj in self.objects:
            self.admin.apply(obj, force=True)

    def token(self) -> str:
        return self.admin.request_token(self.namespace, self.account, expiration_seconds=3600,
                                        bound_secret=None)

    def remove(self) -> None:
        for obj in reversed(self.objects):
            ref = ObjectRef.of(obj)
            self.admin.delete(ref.api_version, ref.kind, ref.name, ref.namespace)
