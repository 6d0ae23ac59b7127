"""The worker's RBAC as the Kustomize base grants it, applied to a real API server for one
ServiceAccount of a test's own: the worker's rights, and nothing more, for the tests that act as
the worker (its reconcilers, and helm with the real vCluster chart). Every Role and ClusterRole
the base binds to the worker's ServiceAccount is taken, in the namespace the base puts it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from app.kube.adapter import KubernetesAdapter
from app.kube.port import Manifest, ObjectRef
from tests.deploy.kustomize import NAMESPACE, WORKER, WORKER_HELM

# (API group, resource, verb)
Pair = tuple[str, str, str]
# A request as the API server authorises it: (namespace, API group, resource, verb, name);
# "" for a cluster-wide request's namespace and a list's name.
Request = tuple[str, str, str, str, str]
BINDINGS = ("RoleBinding", "ClusterRoleBinding")
WORKER_USER = f"system:serviceaccount:{NAMESPACE}:{WORKER}"


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


def worker_bindings(base: list[Manifest]) -> list[Manifest]:
    """The base's bindings of the worker's ServiceAccount."""
    return [o for o in base if o["kind"] in BINDINGS and any(
        s.get("kind") == "ServiceAccount" and s["name"] == WORKER for s in o["subjects"])]


def bound_role(base: list[Manifest], binding: Manifest) -> Manifest:
    ref = binding["roleRef"]
    namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
    found = [o for o in base if o["kind"] == ref["kind"] and o["metadata"]["name"] == ref["name"]
             and o["metadata"].get("namespace") == namespace]
    assert len(found) == 1, f"{ref['kind']} {ref['name']} in {namespace}: {len(found)} found"
    return found[0]


def worker_roles(base: list[Manifest]) -> list[Manifest]:
    """What the worker's own code calls for: every role bound to it but the helm one."""
    return [role for role in (bound_role(base, b) for b in worker_bindings(base))
            if role["metadata"]["name"] != WORKER_HELM]


def worker_pairs(base: list[Manifest]) -> set[Pair]:
    return set().union(*(pairs(role) for role in worker_roles(base)))


def _entries(role: Manifest) -> Iterator[tuple[str, str, str, str]]:
    for rule in role["rules"]:
        yield from product(rule["apiGroups"], rule["resources"], rule["verbs"],
                           rule.get("resourceNames") or [""])


def unasked(role: Manifest, requests: set[Request]) -> list[str]:
    """What ``role`` grants that no request needed: each (group, resource, verb) in the Role's
    namespace (any, for a ClusterRole), and each of a rule's resourceNames."""
    namespace = role["metadata"].get("namespace", "") if role["kind"] == "Role" else None
    found = []
    for group, resource, verb, name in _entries(role):
        if not any((namespace is None or asked[0] == namespace)
                   and asked[1:4] == (group, resource, verb) and (not name or asked[4] == name)
                   for asked in requests):
            where = f"{role['kind']} {role['metadata']['name']}"
            found.append(f"{where}: {group}/{resource} {verb} {name}".rstrip())
    return found


def covered(roles: list[Manifest], request: Request) -> bool:
    """Whether one of ``roles`` allows ``request`` as RBAC does: a Role in its namespace, a
    ClusterRole anywhere; a rule with resourceNames only for those names."""
    namespace, group, resource, verb, name = request
    for role in roles:
        if role["kind"] == "Role" and role["metadata"].get("namespace") != namespace:
            continue
        for rule in role["rules"]:
            names = rule.get("resourceNames") or []
            if (group in rule["apiGroups"] and resource in rule["resources"]
                    and verb in rule["verbs"] and (not names or name in names)):
                return True
    return False


@dataclass
class Grant:
    """The base's worker RBAC, applied under names of its own for one ServiceAccount."""

    admin: KubernetesAdapter
    namespace: str
    account: str
    objects: list[Manifest] = field(default_factory=list)

    def renamed(self, name: str) -> str:
        return self.account + name.removeprefix(WORKER)

    def apply(self, base: list[Manifest], missing: Pair | None) -> None:
        """Every role bound to the worker (``missing`` taken out of all but the helm one) and
        its binding, renamed. The namespaces they go to are made as the base makes them, and
        left: other tests share them."""
        self.objects.append({"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": self.account, "namespace": self.namespace}})
        bindings = worker_bindings(base)
        for binding in bindings:
            role = bound_role(base, binding)
            name = role["metadata"]["name"]
            role = without(role, missing if name != WORKER_HELM else None)
            self.objects.append({**role, "metadata": {**role["metadata"],
                                                      "name": self.renamed(name)}})
        for binding in bindings:
            self.objects.append({
                **binding, "metadata": {**binding["metadata"],
                                        "name": self.renamed(binding["metadata"]["name"])},
                "roleRef": {**binding["roleRef"],
                            "name": self.renamed(binding["roleRef"]["name"])},
                "subjects": [{"kind": "ServiceAccount", "name": self.account,
                              "namespace": self.namespace}]})
        self._namespaces(base)
        self._policies(base)
        for obj in self.objects:
            self.admin.apply(obj, force=True)

    def _policies(self, base: list[Manifest]) -> None:
        """The admission policies that judge the worker's requests, for this ServiceAccount."""
        user = f"system:serviceaccount:{self.namespace}:{self.account}"
        for policy in base:
            if policy["kind"] != "ValidatingAdmissionPolicy" or WORKER_USER not in json.dumps(
                    policy):
                continue
            name = policy["metadata"]["name"]
            mine = json.loads(json.dumps(policy).replace(WORKER_USER, user))
            self.objects.append({**mine, "metadata": {**mine["metadata"],
                                                      "name": self.renamed(name)}})
            for binding in base:
                if (binding["kind"] == "ValidatingAdmissionPolicyBinding"
                        and binding["spec"]["policyName"] == name):
                    self.objects.append({
                        **binding,
                        "metadata": {**binding["metadata"],
                                     "name": self.renamed(binding["metadata"]["name"])},
                        "spec": {**binding["spec"], "policyName": self.renamed(name)}})

    def _namespaces(self, base: list[Manifest]) -> None:
        for namespace in {o["metadata"].get("namespace") for o in self.objects} - {None}:
            if self.admin.get("v1", "Namespace", namespace) is None:
                made = [o for o in base if o["kind"] == "Namespace"
                        and o["metadata"]["name"] == namespace]
                self.admin.apply(made[0] if made else {
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    def token(self) -> str:
        return self.admin.request_token(self.namespace, self.account, expiration_seconds=3600,
                                        bound_secret=None)

    def remove(self) -> None:
        for obj in reversed(self.objects):
            ref = ObjectRef.of(obj)
            self.admin.delete(ref.api_version, ref.kind, ref.name, ref.namespace)
