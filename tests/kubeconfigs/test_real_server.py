"""Kubeconfigs on a real API server standing in for a virtual cluster.

Issued over the REST API; the returned file is used as a tenant would use it, and the API server
itself says what each role may do (SelfSubjectAccessReview) and refuses what the guard forbids.
Revocation and expiry end exactly one token. The guard leaves the control plane's controllers
free to keep up the portal's namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.auth.models import User
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.kube.connector import ClientConnector
from app.kubeconfigs.manifests import PORTAL_NAMESPACE
from app.kubeconfigs.models import KubeconfigGrant
from app.reconcilers.kubeconfigs import KubeconfigReconciler
from tests.support.drive import run_due
from tests.support.kubeconfigs import (
    PODS,
    SETTLE_SECONDS,
    Kubeconfig,
    config_map,
    guard_enforced,
)
from tests.support.tenancy import Tenancy, headers
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kube_server
Issue = Callable[..., tuple["Kubeconfig", int]]
URL = "/api/v1/tenants/acme/clusters/train/kubeconfigs"


@pytest.fixture
def issue(client: TestClient, db: Session, train: VirtualCluster) -> Issue:
    def issue(user: User, role: str, lifetime: int = 3600) -> tuple[Kubeconfig, int]:
        auth = headers(db, user)
        db.commit()
        response = client.post(URL, json={"role": role, "lifetime_seconds": lifetime},
                               headers=auth)
        assert response.status_code == 201, response.text
        grant_id = db.query(KubeconfigGrant.id).order_by(KubeconfigGrant.id.desc()).first()
        assert grant_id is not None
        return Kubeconfig.parse(response.text), grant_id[0]

    return issue


def test_a_members_view_kubeconfig_works_expires_as_asked_and_reads_no_secrets(
    issue: Issue, tenancy: Tenancy,
) -> None:
    view, _ = issue(tenancy.acme_member, "view", 3600)
    assert view.answers() == 200
    claims = view.claims()
    assert claims["exp"] - claims["iat"] == 3600
    assert view.may("list", "pods") and view.may("get", "deployments", group="apps")
    assert not view.may("get", "secrets")
    assert not view.may("list", "secrets", namespace=PORTAL_NAMESPACE)
    assert not view.may("create", "pods")
    assert not view.may("impersonate", "serviceaccounts")
    assert not view.may("create", "serviceaccounts", subresource="token")


def test_edit_works_but_cannot_impersonate_mint_tokens_or_write_in_the_portal_namespace(
    issue: Issue, tenancy: Tenancy,
) -> None:
    admin, admin_grant = issue(tenancy.acme_admin, "admin")
    edit, _ = issue(tenancy.acme_member, "edit")
    assert edit.may("create", "deployments", group="apps") and edit.may("create", "pods")
    assert edit.call("POST", "/api/v1/namespaces/default/configmaps",
                     config_map(f"edit-{admin_grant}", "default")).status_code == 201
    assert not edit.may("impersonate", "serviceaccounts")
    assert not edit.may("create", "serviceaccounts", subresource="token")
    admin_account = admin.claims()["sub"]
    impersonating = edit.call("GET", PODS, **{"Impersonate-User": admin_account})
    assert impersonating.status_code == 403

    # RBAC would let edit write Secrets everywhere; the guard keeps it out of the portal's.
    assert edit.may("delete", "secrets", namespace=PORTAL_NAMESPACE)
    assert guard_enforced(edit)
    secrets = f"/api/v1/namespaces/{PORTAL_NAMESPACE}/secrets"
    refused = edit.call("DELETE", f"{secrets}?labelSelector=gpu-tenant-portal/role%3Dadmin")
    assert refused.status_code == 403
    assert "managed by the GPU Tenant Portal" in refused.json()["message"]
    assert admin.answers() == 200  # the admin's kubeconfig is untouched


def test_an_admin_kubeconfig_is_cluster_admin_except_in_the_portal_namespace(
    issue: Issue, tenancy: Tenancy,
) -> None:
    admin, grant_id = issue(tenancy.acme_admin, "admin")
    assert admin.may("*", "*", namespace="") and admin.may("impersonate", "serviceaccounts")
    created = admin.call("POST", "/api/v1/namespaces/default/configmaps",
                         config_map(f"admin-{grant_id}", "default"))
    assert created.status_code == 201
    assert guard_enforced(admin)


def test_revoking_ends_that_token_alone_and_expiry_ends_the_other(
    issue: Issue, tenancy: Tenancy, client: TestClient, db: Session, database: Database,
    settings: Settings,
) -> None:
    first, first_id = issue(tenancy.acme_member, "view")
    second, second_id = issue(tenancy.acme_member, "view")
    assert first.answers() == second.answers() == 200

    auth = headers(db, tenancy.acme_member)
    db.commit()
    assert client.delete(f"{URL}/{first_id}", headers=auth).status_code == 204
    wait_for(lambda: first.answers() == 401, "the revoked token to be refused",
             timeout=SETTLE_SECONDS)
    assert second.answers() == 200

    grant = db.get(KubeconfigGrant, second_id)
    assert grant is not None
    grant.expires_at = utcnow() - timedelta(seconds=1)
    db.commit()
    sweeper = KubeconfigReconciler.from_settings(settings, database, ClientConnector(settings))
    assert run_due(sweeper, "test") == 1
    wait_for(lambda: second.answers() == 401, "the expired token to be refused",
             timeout=SETTLE_SECONDS)


def test_the_control_plane_still_keeps_up_the_portal_namespace(
    issue: Issue, tenancy: Tenancy, virtual: KubernetesAdapter,
) -> None:
    """Like every namespace, the portal's has its ``default`` ServiceAccount and the cluster's
    CA bundle, which the controllers (acting as their own ServiceAccounts, as vCluster and
    kubeadm run them) put back when they go: the guard must not refuse them."""
    admin, _ = issue(tenancy.acme_admin, "admin")
    assert guard_enforced(admin)  # the policy is loaded (RBAC lets an admin write there)
    for kind, name in (("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")):
        virtual.delete("v1", kind, name, PORTAL_NAMESPACE)  # as the portal's admin may
        wait_for(partial(restored, virtual, kind, name), f"{kind} {name} to be restored",
                 timeout=SETTLE_SECONDS)


def restored(port: KubernetesAdapter, kind: str, name: str) -> bool:
    return port.get("v1", kind, name, PORTAL_NAMESPACE) is not None


def system_pod(namespace: str, service_account: str) -> dict[str, object]:
    container = {"name": "c", "image": "registry.example/tool:1", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "borrowed-identity", "namespace": namespace},
            "spec": {"serviceAccountName": service_account, "containers": [container]}}


def test_edit_and_view_cannot_borrow_a_controllers_identity_in_kube_system(
    issue: Issue, tenancy: Tenancy,
) -> None:
    admin, _ = issue(tenancy.acme_admin, "admin")
    edit, _ = issue(tenancy.acme_member, "edit")
    steal = system_pod("kube-system", "namespace-controller")
    create_in = "/api/v1/namespaces/{}/pods?dryRun=All"
    # RBAC alone would let it: edit is bound cluster-wide and creates pods.
    assert edit.may("create", "pods", namespace="kube-system")
    wait_for(lambda: edit.call("POST", create_in.format("kube-system"), steal).status_code == 403,
             "a write in kube-system to be refused", timeout=SETTLE_SECONDS)
    refused = edit.call("POST", create_in.format("kube-system"), steal)
    assert "system namespaces" in refused.json()["message"]
    assert edit.call("POST", create_in.format("default"),
                     system_pod("default", "default")).status_code == 201
    assert admin.call("POST", create_in.format("kube-system"), steal).status_code == 201
