"""The Kustomize manifests (deploy/kubernetes/): they render, every object passes the real API
server's validation and admission (server-side dry-run), and what an operator relies on holds:
restricted pods, resources, probes, Secrets only referenced, RBAC without wildcards."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests.baremetal import MACHINES_NAMESPACE, bootstrap_role_bindings
from tests.deploy.kustomize import BASE, EXAMPLE, NAMESPACE, find, kubectl, render, render_yaml
from tests.support.kube_server import ApiServer

WORKLOADS = ("Deployment", "Job")
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - in a pod: the Service and the kubelet call in
TMP = "/tmp"  # noqa: S108 - the emptyDir each pod mounts there
COMMANDS = {
    "gpu-tenant-portal-web": ["portal", "serve", "--host", ALL_INTERFACES, "--port", "8000"],
    "gpu-tenant-portal-worker": ["portal", "worker"],
    "gpu-tenant-portal-webhook": ["portal", "webhook", "--host", ALL_INTERFACES, "--port",
                                  "9443", "--cert-dir", TMP],
    "gpu-tenant-portal-migrate": ["portal", "db", "upgrade"],
}


@pytest.fixture(scope="module")
def example() -> list[dict[str, Any]]:
    return render(EXAMPLE)


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"]
            for o in objects if o["kind"] in WORKLOADS}


@pytest.fixture
def machines_namespace(host_admin: KubernetesAdapter) -> str:
    """The base makes it, but a dry run makes nothing: the Role in it needs it there. Left
    for the run (the machines tests use it too)."""
    if host_admin.get("v1", "Namespace", MACHINES_NAMESPACE) is None:
        host_admin.apply({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": MACHINES_NAMESPACE}})
    return MACHINES_NAMESPACE


@pytest.mark.kube_server
def test_the_example_overlay_applies_on_a_real_api_server(
    kai_host: ApiServer, portal_namespace: None, machines_namespace: str, tmp_path: Path
) -> None:
    kubeconfig = kai_host.write_admin_kubeconfig(tmp_path / "admin.kubeconfig")
    done = subprocess.run(
        [kubectl(), "apply", "--server-side", "--dry-run=server", "--field-manager=operator",
         f"--kubeconfig={kubeconfig}", "-f", "-"],
        input=render_yaml(EXAMPLE), capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    applied = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(applied) == len(render(EXAMPLE))
    assert all(line.endswith("serverside-applied (server dry run)") for line in applied), applied
    # Pod Security "restricted" is enforced on the namespace: any violation would warn here
    assert "Warning" not in done.stderr, done.stderr


def test_the_base_renders_every_part(example: list[dict[str, Any]]) -> None:
    base = render(BASE)
    kinds = sorted({(o["kind"], o["metadata"]["name"]) for o in base})
    assert ("Deployment", "gpu-tenant-portal-web") in kinds
    assert ("Deployment", "gpu-tenant-portal-worker") in kinds
    assert ("Deployment", "gpu-tenant-portal-webhook") in kinds
    assert ("Service", "gpu-tenant-portal-webhook") in kinds  # PORTAL_WEBHOOK_SERVICE_NAME
    assert ("Job", "gpu-tenant-portal-migrate") in kinds
    assert ("Ingress", "gpu-tenant-portal") in kinds
    for name in ("gpu-tenant-portal-web", "gpu-tenant-portal-worker",
                 "gpu-tenant-portal-webhook"):
        assert ("PodDisruptionBudget", name) in kinds
    assert ("Namespace", MACHINES_NAMESPACE) in kinds
    # the bound on the worker's writes in kube-system that RBAC cannot express
    policy = "gpu-tenant-portal-worker-kube-system-secrets"
    assert ("ValidatingAdmissionPolicy", policy) in kinds
    assert ("ValidatingAdmissionPolicyBinding", policy) in kinds
    assert {o["metadata"].get("namespace") for o in base if o["kind"] not in (
        "Namespace", "ClusterRole", "ClusterRoleBinding")} == {
        NAMESPACE, MACHINES_NAMESPACE, "kube-system", "kube-public"}
    # only the worker's Roles for machines (and their bindings) are elsewhere
    elsewhere = {(o["kind"], o["metadata"]["name"]) for o in base
                 if o["metadata"].get("namespace") not in (None, NAMESPACE)}
    assert {kind for kind, _ in elsewhere} == {"Role", "RoleBinding"}
    assert {name for _, name in elsewhere} == {
        "gpu-tenant-portal-worker-machines", "gpu-tenant-portal-worker-bootstrap-tokens",
        "gpu-tenant-portal-worker-cluster-info"}
    # the webhook's registration is the worker's: none is shipped
    assert not [o for o in base if o["kind"] == "MutatingWebhookConfiguration"]


def test_each_workload_runs_its_command_restricted_with_resources(
    example: list[dict[str, Any]]
) -> None:
    specs = pod_specs(example)
    assert sorted(specs) == sorted(COMMANDS)
    for name, spec in specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        (container,) = spec["containers"]
        assert container["args"] == COMMANDS[name]
        assert container["image"] == "registry.example.com/platform/gpu-tenant-portal:0.1.0"
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"] == {"drop": ["ALL"]}, name
        assert set(container["resources"]) == {"requests", "limits"}, name
        tmp = {m["name"] for m in container["volumeMounts"] if m["mountPath"] == TMP}
        assert [v for v in spec["volumes"] if v["name"] in tmp and "emptyDir" in v], name


def test_secrets_are_referenced_never_inlined(example: list[dict[str, Any]]) -> None:
    assert not [o for o in example if o["kind"] == "Secret"]
    for name, spec in pod_specs(example).items():
        (container,) = spec["containers"]
        assert {"secretRef": {"name": "gpu-tenant-portal"}} in container["envFrom"], name
        assert not [e for e in container.get("env") or [] if "value" in e and "KEY" in e["name"]]
    config = next(o for o in example if o["kind"] == "ConfigMap")
    assert not [key for key in config["data"] if "SECRET" in key or key.endswith("_KEY")]
    assert config["data"]["PORTAL_ENV"] == "production"


def test_only_the_migrations_go_without_a_token_and_the_web_is_bound_to_nothing(
    example: list[dict[str, Any]]
) -> None:
    specs = pod_specs(example)
    assert specs["gpu-tenant-portal-migrate"]["automountServiceAccountToken"] is False
    bound = {s["name"] for o in example if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
             for s in o["subjects"]}
    assert bound == {"gpu-tenant-portal-worker", "gpu-tenant-portal-webhook"}


def test_rbac_names_every_resource_and_verb(example: list[dict[str, Any]]) -> None:
    # `bind` only on the two built-in roles a machine's bootstrap token is given
    bootstrap_roles = sorted(b["roleRef"]["name"] for b in bootstrap_role_bindings())
    binds = []
    for role in (o for o in example if o["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(field) or []), (role["metadata"]["name"], rule)
            assert "escalate" not in rule["verbs"] and "impersonate" not in rule["verbs"]
            if "bind" in rule["verbs"]:
                binds.append((role["kind"], role["metadata"]["name"], rule))
    assert binds == [("ClusterRole", "gpu-tenant-portal-worker", {
        "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
        "resourceNames": bootstrap_roles, "verbs": ["bind"]})]


def test_the_portal_namespace_is_closed_but_for_what_is_listed(
    example: list[dict[str, Any]]
) -> None:
    deny = find(example, "NetworkPolicy", "default-deny")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    web = find(example, "NetworkPolicy", "web-ingress")["spec"]
    assert web["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8000}]}]
    namespace = find(example, "Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    ingress = find(example, "Ingress", "gpu-tenant-portal")["spec"]
    assert ingress["rules"][0]["host"] == "gpu.example.com"
