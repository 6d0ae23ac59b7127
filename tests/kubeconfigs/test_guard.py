"""The guard of the portal namespace: the portal's edit role, the admission policy, and who the
portal is. The pure tests pin the manifests; the issuing tests (``kube_server``) check, on a real
kube-apiserver standing in for the virtual cluster (``virtual_api``), that issuing applies them
as built, before any grant object, once, and replaces a stale binding. That the server then
enforces them (RBAC, admission) is in ``test_real_server.py``."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import dump_yaml
from app.kube.memory import fake_service_account_token
from app.kubeconfigs.guard import (
    POLICY_NAME,
    PortalIdentity,
    edit_cluster_role,
    guard_objects,
    namespace_guard_binding,
    namespace_guard_policy,
    portal_identity,
    trusted_expression,
)
from app.kubeconfigs.manifests import EDIT_ROLE
from tests.kubeconfigs.test_manifests import check_golden
from tests.support.kube import Call, RecordingConnector
from tests.support.kube_server import ApiServer
from tests.support.tenancy import Tenancy, headers
from tests.support.virtual_clusters import admin_kubeconfig

URL = "/api/v1/tenants/acme/clusters/train/kubeconfigs"
NS = "gpu-tenant-portal"
RBAC = "rbac.authorization.k8s.io/v1"
ADMISSION = "admissionregistration.k8s.io/v1"
VCLUSTER_ADMIN = PortalIdentity(usernames=("kubernetes-admin",))


def rules_for(resource: str) -> list[dict[str, Any]]:
    return [r for r in edit_cluster_role()["rules"] if resource in r["resources"]]


def test_golden_guard_objects() -> None:
    check_golden("guard-objects.yaml", "---\n".join(map(dump_yaml, guard_objects(VCLUSTER_ADMIN))))


def test_the_edit_role_cannot_impersonate_mint_tokens_or_touch_rbac() -> None:
    rules = edit_cluster_role()["rules"]
    verbs = {verb for rule in rules for verb in rule["verbs"]}
    resources = {resource for rule in rules for resource in rule["resources"]}
    groups = {group for rule in rules for group in rule["apiGroups"]}
    assert "impersonate" not in verbs and not verbs & {"escalate", "bind", "approve", "sign"}
    assert "serviceaccounts/token" not in resources
    assert not {r for r in resources if r.endswith("/proxy")}
    assert "*" not in verbs | resources | groups  # explicit rules only, nothing aggregated
    assert not groups & {"rbac.authorization.k8s.io", "admissionregistration.k8s.io",
                         "certificates.k8s.io", "authentication.k8s.io"}
    assert "aggregationRule" not in edit_cluster_role()


def test_the_edit_role_keeps_what_workloads_need() -> None:
    def verbs(resource: str) -> set[str]:
        return {verb for rule in rules_for(resource) for verb in rule["verbs"]}

    for resource in ("pods", "deployments", "statefulsets", "jobs", "cronjobs", "services",
                     "configmaps", "secrets", "persistentvolumeclaims", "ingresses",
                     "networkpolicies", "horizontalpodautoscalers", "poddisruptionbudgets",
                     "leases", "serviceaccounts"):
        assert {"get", "list", "watch", "create", "update", "patch", "delete"} <= verbs(resource)
    assert {"create", "get"} <= verbs("pods/exec") & verbs("pods/portforward")
    assert verbs("pods/log") == {"get", "list", "watch"}
    assert verbs("namespaces") == {"get", "list", "watch"}


def test_the_policy_guards_everything_in_the_portal_namespace_and_the_namespace_itself() -> None:
    spec = namespace_guard_policy(VCLUSTER_ADMIN)["spec"]
    constraints = spec["matchConstraints"]
    assert spec["failurePolicy"] == "Fail"
    assert constraints["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": NS}}
    namespaced, namespaces = constraints["resourceRules"]
    assert namespaced["resources"] == ["*/*"] and namespaced["scope"] == "Namespaced"
    assert namespaces["resources"] == ["namespaces", "namespaces/*"]
    for rule in (namespaced, namespaces):
        assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    binding = namespace_guard_binding()["spec"]
    assert binding == {"policyName": POLICY_NAME, "validationActions": ["Deny"]}


def test_only_the_portal_and_the_control_plane_are_trusted() -> None:
    controllers = [f'"system:serviceaccount:kube-system:{name}"' for name in (
        "generic-garbage-collector", "namespace-controller", "root-ca-cert-publisher",
        "service-account-controller", "service-ca-cert-publisher")]
    assert trusted_expression(VCLUSTER_ADMIN) == (
        'request.userInfo.username in ["kubernetes-admin", "system:kube-controller-manager", '
        f'{", ".join(controllers)}] '
        '|| (has(request.userInfo.groups) && "system:masters" in request.userInfo.groups)')
    odd = trusted_expression(PortalIdentity(usernames=('a"] || true || ["',)))
    assert '"a\\"] || true || [\\""' in odd  # a hostile CN stays one string literal


def client_certificate(common_name: str, organization: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(now + timedelta(days=1))
                   .sign(key, hashes.SHA256()))
    return base64.b64encode(certificate.public_bytes(serialization.Encoding.PEM)).decode()


def with_user(user: dict[str, str]) -> str:
    config = yaml.safe_load(admin_kubeconfig("https://vc.example"))
    config["users"][0]["user"] = user
    return yaml.safe_dump(config)


def test_the_portal_identity_comes_from_the_admin_kubeconfig() -> None:
    certificate = client_certificate("kubernetes-admin", "system:masters")
    assert portal_identity(with_user({"client-certificate-data": certificate,
                                      "client-key-data": "unused"})) == VCLUSTER_ADMIN
    token = fake_service_account_token("kube-system", "vcluster-admin", None, 3600)
    assert portal_identity(with_user({"token": token})) == PortalIdentity(
        usernames=("system:serviceaccount:kube-system:vcluster-admin",))
    # An opaque token says nothing about its user: system:masters alone is trusted.
    assert portal_identity(admin_kubeconfig("https://vc.example")) == PortalIdentity()
    other_jwt = ".".join(base64.urlsafe_b64encode(json.dumps(part).encode()).decode()
                         for part in ({"alg": "none"}, {"sub": "alice"}, {}))
    assert portal_identity(with_user({"token": other_jwt})) == PortalIdentity()


# ----- issuing applies the guard (on the real API server, through the official client)


def issue(client: TestClient, db: Session, tenancy: Tenancy, role: str = "edit") -> None:
    auth = headers(db, tenancy.acme_member)
    db.commit()
    response = client.post(URL, json={"role": role, "lifetime_seconds": 3600}, headers=auth)
    assert response.status_code == 201, response.text


@pytest.mark.kube_server
def test_issuing_an_edit_kubeconfig_guards_the_cluster_and_binds_the_portal_role(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
    virtual: KubernetesAdapter, virtual_api: ApiServer, kube_calls: RecordingConnector,
) -> None:
    issue(client, db, tenancy)

    role = virtual.get(RBAC, "ClusterRole", EDIT_ROLE)
    assert role is not None and role["rules"] == edit_cluster_role()["rules"]
    # The admin credential vCluster exports is the kubeadm-style admin's: the portal is it.
    assert portal_identity(virtual_api.admin_kubeconfig) == VCLUSTER_ADMIN
    policy = virtual.get(ADMISSION, "ValidatingAdmissionPolicy", POLICY_NAME)
    built = namespace_guard_policy(VCLUSTER_ADMIN)["spec"]
    # As built, plus the two fields the API server defaults.
    defaulted = {**built, "matchConstraints": {**built["matchConstraints"],
                                               "matchPolicy": "Equivalent", "objectSelector": {}}}
    assert policy is not None and policy["spec"] == defaulted
    binding = virtual.get(ADMISSION, "ValidatingAdmissionPolicyBinding", POLICY_NAME)
    assert binding is not None and binding["spec"]["policyName"] == POLICY_NAME
    grant_binding = virtual.get(RBAC, "ClusterRoleBinding",
                                f"{NS}:user-{tenancy.acme_member.id}-edit")
    assert grant_binding is not None and grant_binding["roleRef"]["name"] == EDIT_ROLE
    writes = kube_calls.writes
    guard_at = writes.index(Call("apply", "ValidatingAdmissionPolicyBinding", POLICY_NAME))
    account_at = writes.index(Call("apply", "ServiceAccount",
                                   f"user-{tenancy.acme_member.id}-edit"))
    assert guard_at < account_at  # no ServiceAccount ever exists unguarded


@pytest.mark.kube_server
def test_the_guard_is_applied_idempotently(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
    virtual: KubernetesAdapter,
) -> None:
    guard = [(ADMISSION, "ValidatingAdmissionPolicy", POLICY_NAME),
             (ADMISSION, "ValidatingAdmissionPolicyBinding", POLICY_NAME),
             (RBAC, "ClusterRole", EDIT_ROLE)]
    def stored() -> list[dict[str, Any]]:
        objects = [virtual.get(*ref) for ref in guard]
        return [o for o in objects if o is not None]

    issue(client, db, tenancy)
    first = stored()
    issue(client, db, tenancy, "view")
    again = stored()
    assert len(first) == len(again) == len(guard)
    policy, binding, role = first
    policy_again, binding_again, role_again = again
    assert [o["metadata"]["resourceVersion"] for o in (binding_again, role_again)] == [
        o["metadata"]["resourceVersion"] for o in (binding, role)]  # not written at all
    # The policy is the same object, unchanged. (After the server writes its status, the next
    # apply may still re-sort the portal's managedFields entry: its time and place in the
    # list. A real server does that for any field manager; nothing else changes.)
    assert [policy_again["metadata"][k] for k in ("uid", "generation")] == [
        policy["metadata"][k] for k in ("uid", "generation")]
    assert policy_again["spec"] == policy["spec"]
    assert owned_fields(policy_again) == owned_fields(policy)


def owned_fields(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """Which fields each manager owns, whatever the entries' times and order."""
    return sorted((str(m["manager"]), json.dumps(m.get("fieldsV1"), sort_keys=True))
                  for m in obj["metadata"]["managedFields"])


@pytest.mark.kube_server
def test_a_binding_to_the_built_in_edit_role_is_replaced(
    client: TestClient, db: Session, tenancy: Tenancy, train: VirtualCluster,
    virtual: KubernetesAdapter, kube_calls: RecordingConnector,
) -> None:
    name = f"{NS}:user-{tenancy.acme_member.id}-edit"
    stale = virtual.apply({"apiVersion": RBAC, "kind": "ClusterRoleBinding",
                           "metadata": {"name": name},
                           "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                       "kind": "ClusterRole", "name": "edit"},
                           "subjects": [{"kind": "ServiceAccount", "namespace": NS,
                                         "name": f"user-{tenancy.acme_member.id}-edit"}]},
                          force=True)
    issue(client, db, tenancy)
    binding = virtual.get(RBAC, "ClusterRoleBinding", name)
    assert binding is not None and binding["roleRef"]["name"] == EDIT_ROLE
    # A roleRef cannot change: the binding was deleted and made anew.
    assert binding["metadata"]["uid"] != stale["metadata"]["uid"]
    assert Call("delete", "ClusterRoleBinding", name) in kube_calls.writes
