"""Issued kubeconfigs on a real API server: read one as kubectl would, ask the server what its
token may do, decode the token, and see what the portal sent to the virtual cluster.

The API server is shared by the whole run: whatever a test looks for is named by its own user
(``user-<id>-<role>``, ids from PostgreSQL sequences) or labelled with its user id, never
counted namespace-wide.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kube.port import KubePort
from app.kubeconfigs.manifests import PORTAL_NAMESPACE, USER_ID
from app.tenants.models import Tenant
from tests.support.kube_server import ApiServer
from tests.support.virtual_clusters import ready_cluster
from tests.support.waiting import wait_for

PODS = "/api/v1/namespaces/default/pods"
RBAC = "rbac.authorization.k8s.io/v1"


@dataclass(frozen=True)
class Kubeconfig:
    """An issued kubeconfig, read as kubectl would."""

    server: str
    token: str
    context: ssl.SSLContext

    @classmethod
    def parse(cls, text: str) -> Kubeconfig:
        config = yaml.safe_load(text)
        cluster = config["clusters"][0]["cluster"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        return cls(cluster["server"], config["users"][0]["user"]["token"],
                   ssl.create_default_context(cadata=ca))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             **headers: str) -> httpx.Response:
        return httpx.request(method, self.server + path, json=body, verify=self.context,
                             headers={"Authorization": f"Bearer {self.token}", **headers},
                             timeout=10.0)

    def may(self, verb: str, resource: str, *, namespace: str = "default", group: str = "",
            subresource: str = "") -> bool:
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": {
                      "verb": verb, "resource": resource, "namespace": namespace,
                      "group": group, "subresource": subresource}}}
        response = self.call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                             review)
        assert response.status_code == 201, response.text
        return bool(response.json()["status"]["allowed"])

    def claims(self) -> dict[str, Any]:
        return token_claims(self.token)

    def answers(self) -> int:
        return self.call("GET", PODS).status_code

    def who_am_i(self) -> str:
        """The username the API server authenticates this token as (SelfSubjectReview)."""
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        response = self.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                             review)
        assert response.status_code == 201, response.text
        return str(response.json()["status"]["userInfo"]["username"])


def token_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "==="))
    return decoded


def account_username(service_account: str) -> str:
    return f"system:serviceaccount:{PORTAL_NAMESPACE}:{service_account}"


def bound_secret_name(claims: Mapping[str, Any]) -> str | None:
    """The Secret a TokenRequest bound the token to (the ``kubernetes.io`` claim)."""
    secret = (claims.get("kubernetes.io") or {}).get("secret") or {}
    name = secret.get("name")
    return name if isinstance(name, str) else None


def config_map(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}}


# How long kube-apiserver may take to act on a change: it caches a token's successful
# authentication for 10 s (a revoked token keeps working that long at most), and loads a new
# admission policy asynchronously.
SETTLE_SECONDS = 15.0


def guard_enforced(kubeconfig: Kubeconfig) -> bool:
    """Waits until a write in the portal's namespace is refused (tried as a dry run).

    The API server loads a new admission policy asynchronously: on a brand-new cluster the
    guard applied with the first kubeconfig takes effect a moment later.
    """
    path = f"/api/v1/namespaces/{PORTAL_NAMESPACE}/configmaps?dryRun=All"
    return wait_for(lambda: kubeconfig.call(
        "POST", path, config_map("sneaky", PORTAL_NAMESPACE)).status_code == 403,
        f"a write in {PORTAL_NAMESPACE} to be refused", timeout=SETTLE_SECONDS)


def public_endpoint(api: ApiServer) -> str:
    """The API server under another name than its admin kubeconfig's (``localhost``, which
    its serving certificate names too): a kubeconfig naming it shows that it names the
    cluster's endpoint, not the admin credential's server, and it still works."""
    return api.url.replace("://127.0.0.1:", "://localhost:")


def real_ready_cluster(db: Session, tenant: Tenant, api: ApiServer,
                       **options: Any) -> VirtualCluster:
    """A Ready cluster row whose endpoint and sealed admin credential are ``api``'s."""
    return ready_cluster(db, tenant, endpoint=public_endpoint(api),
                         kubeconfig=api.admin_kubeconfig, **options)


def objects_of_user(port: KubePort, user_id: int) -> list[tuple[str, str]]:
    """(kind, name) of every ServiceAccount, Secret and ClusterRoleBinding a grant of this
    user would make (all carry the user-id label)."""
    selector = {USER_ID: str(user_id)}
    found = []
    for api_version, kind, namespace in (("v1", "ServiceAccount", PORTAL_NAMESPACE),
                                         ("v1", "Secret", PORTAL_NAMESPACE),
                                         (RBAC, "ClusterRoleBinding", None)):
        found += [(kind, o["metadata"]["name"])
                  for o in port.list(api_version, kind, namespace, label_selector=selector)]
    return found


def forget_users_on_virtual(database: Database, virtual: ApiServer) -> None:
    """Deletes what grants made on the shared virtual API server for every user of
    ``database``: a later test's user with the same id must not find it."""
    with database.session() as db:
        user_ids = list(db.scalars(select(User.id)))
    port = virtual.adapter()
    for user_id in user_ids:
        for kind, name in objects_of_user(port, user_id):
            api_version = "v1" if kind != "ClusterRoleBinding" else RBAC
            namespace = None if kind == "ClusterRoleBinding" else PORTAL_NAMESPACE
            port.delete(api_version, kind, name, namespace)
    port.close()
