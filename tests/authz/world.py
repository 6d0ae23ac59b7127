"""The world the authorization matrix runs in: two tenants, every role, a platform admin."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User, WebSession
from app.auth.service import issue_api_token
from app.auth.sessions import hash_session_id
from app.database.core import utcnow
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.config import DEV_ENCRYPTION_KEY
from app.kit.crypto import SecretBox
from app.lab.pki import CertificateAuthority
from app.notifications.models import WebhookEndpoint
from app.quotas.models import QuotaRequest
from app.tenants.models import GroupMapping, Tenant
from tests import factories
from tests.support import virtual_clusters
from tests.support.kube_server import kubeconfig_yaml
from tests.support.principals import bearer

HOST_CA = CertificateAuthority()
# A name that never resolves (RFC 2606): the check route fails fast, as a check.
HOST_SERVER = "https://matrix-host.invalid:6443"
HOST_KUBECONFIG = kubeconfig_yaml(HOST_SERVER, HOST_CA.cert_pem, token="matrix-token")

# A world serves a worker's walks for the whole run (tests/authz/conftest.py): its browser
# sessions and kubeconfig grant last longer than a run on a loaded machine (an hour and more).
SESSION_HOURS = 12

PRINCIPALS = (
    "anonymous",
    "outsider",
    "acme_viewer",
    "acme_member",
    "globex_admin",
    "acme_admin",
    "platform_admin",
)


@dataclass
class Caller:
    user: User | None
    headers: dict[str, str] = field(default_factory=dict)
    cookie: str | None = None
    csrf: str = ""


@dataclass
class World:
    users: dict[str, User]
    gpu_class_id: int
    pending_request_id: int
    acme_member_id: int
    mapping_id: int
    callers: dict[str, Caller] = field(default_factory=dict)
    # A second token per user, for the revoke routes; ``current`` is the caller under test.
    spare_token_ids: dict[str, int] = field(default_factory=dict)
    current: str = "anonymous"
    # Kubeconfigs (issue 7): acme's ready cluster and a grant of acme's member on it.
    kubeconfig_cluster: str = ""
    grant_id: int = 0
    # Nodes (issue 5): a free H100 node (acme's quota of 8 fits it) and one dedicated to globex.
    free_node: str = ""
    assigned_node: str = ""
    # Clusters (issue 6): acme's Ready cluster "train" with 4 of its 8 H100s.
    cluster_name: str = ""
    # Templates (issue 16): "matrix" with a draft v1 that passed validation; "train" is on
    # default v1 and default v2 is offered, so it can be upgraded.
    template_name: str = ""
    # Host clusters (issue 17): a registered host no node or cluster points at.
    host_name: str = ""
    # Machines (issue 32): a registered machine in the pool of the default host.
    machine_name: str = ""
    # Webhook endpoints (issue 60): one of acme's and one of the platform's.
    webhook_id: int = 0
    platform_webhook_id: int = 0


def _session_cookie(db: Session, user: User) -> tuple[str, str]:
    session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
    now = utcnow()
    db.add(WebSession(id_hash=hash_session_id(session_id), user_id=user.id,
                      data={"uid": user.id, "csrf": csrf}, created_at=now, last_seen_at=now,
                      expires_at=now + timedelta(hours=SESSION_HOURS)))
    return session_id, csrf


def build_world(db: Session) -> World:
    acme, globex = factories.tenant(db, "acme"), factories.tenant(db, "globex")
    users = {name: factories.user(db, f"{name}@example.com") for name in PRINCIPALS[1:]}
    users["platform_admin"].is_platform_admin = True
    member = None
    for role in ("viewer", "member", "admin"):
        row = factories.membership(db, acme, users[f"acme_{role}"], role)
        member = row if role == "member" else member
    factories.membership(db, globex, users["globex_admin"], "admin")
    gpu = factories.gpu_class(db)
    factories.quota(db, acme, gpu, gpus=16)  # room to dedicate an 8-GPU node
    request = QuotaRequest(tenant_id=acme.id, gpu_class_id=gpu.id, gpus=2, reason="matrix")
    db.add(request)
    mapping = GroupMapping(tenant_id=acme.id, group_name="acme-staff", role="viewer")
    db.add(mapping)
    db.flush()
    assert member is not None
    world = World(users=users, gpu_class_id=gpu.id, pending_request_id=request.id,
                  acme_member_id=member.id, mapping_id=mapping.id)
    world.callers["anonymous"] = Caller(user=None)
    for name, user in users.items():
        cookie, csrf = _session_cookie(db, user)
        world.callers[name] = Caller(user=user, headers=bearer(db, user), cookie=cookie,
                                     csrf=csrf)
        spare, _secret = issue_api_token(db, user, name="spare", scopes=["read"],
                                         expires_at=None, actor_label="test")
        world.spare_token_ids[name] = spare.id
    _add_kubeconfig_grant(db, world, acme)
    _add_nodes(db, world, gpu, globex)
    _add_cluster(db, world, acme, gpu)
    _add_templates(db, world)
    _add_registered_host(db, world)
    _add_machine(db, world, gpu)
    _add_webhooks(db, world, acme)
    db.flush()
    return world


def _add_webhooks(db: Session, world: World, acme: Tenant) -> None:
    sealed = SecretBox(DEV_ENCRYPTION_KEY).seal("whsec_" + "A" * 44)
    rows = [WebhookEndpoint(tenant_id=tenant_id, name="matrix-hook", format="cloudevents",
                            url="https://93.184.216.34/hook", secret_sealed=sealed)
            for tenant_id in (acme.id, None)]
    db.add_all(rows)
    db.flush()
    world.webhook_id, world.platform_webhook_id = rows[0].id, rows[1].id


def _add_machine(db: Session, world: World, gpu: GpuClass) -> None:
    """On the default host: the registered one is deleted by the hosts' routes."""
    host = db.scalar(select(HostCluster).where(HostCluster.is_default.is_(True)))
    assert host is not None
    world.machine_name = factories.machine(db, host, gpu, name="matrix-machine",
                                           key=DEV_ENCRYPTION_KEY).name


def _add_registered_host(db: Session, world: World) -> None:
    """Sealed with the key the matrix's settings use (the development one)."""
    sealed = SecretBox(DEV_ENCRYPTION_KEY).seal(HOST_KUBECONFIG)
    host = HostCluster(name="matrix-host", region="eu-west", credential_kind="kubeconfig",
                       credentials_encrypted=sealed, api_endpoint=HOST_SERVER)
    db.add(host)
    db.flush()
    world.host_name = host.name


def _add_templates(db: Session, world: World) -> None:
    template = factories.cluster_template(db, "matrix")
    factories.template_version(db, template, 1, state="draft", validation=factories.PASSED)
    factories.default_template_version(db, 2)
    world.template_name = template.name


def _add_cluster(db: Session, world: World, acme: Tenant, gpu: GpuClass) -> None:
    cluster = factories.cluster(db, acme, factories.host_cluster(db), "train",
                                gpu_class_id=gpu.id, gpus=4, observed_generation=1,
                                template_version_id=factories.default_template_version(db).id,
                                endpoint="https://train.acme.vc.example.com",
                                conditions=[virtual_clusters.READY])
    world.cluster_name = cluster.name


def _add_kubeconfig_grant(db: Session, world: World, acme: Tenant) -> None:
    cluster = virtual_clusters.ready_cluster(db, acme, name="kc-train")
    world.kubeconfig_cluster = cluster.name
    world.grant_id = virtual_clusters.grant(db, cluster, world.users["acme_member"].id,
                                            hours=SESSION_HOURS).id


def _add_nodes(db: Session, world: World, gpu: GpuClass, globex: Tenant) -> None:
    host = HostCluster(name="default", is_default=True)
    db.add(host)
    db.flush()
    world.free_node = factories.node(db, host, gpu, name="matrix-n1").name
    dedicated = factories.node(db, host, gpu, name="matrix-n2")
    factories.assignment(db, dedicated, globex)
    world.assigned_node = dedicated.name
