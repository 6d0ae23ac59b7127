"""Plain factory functions: each adds a row with sensible defaults and flushes."""

from __future__ import annotations

import itertools
import json

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.auth.principal import Principal
from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.machines.models import Machine
from app.nodes.models import Node, NodeAssignment
from app.quotas.models import QuotaRequest, TenantQuota
from app.templates.models import ClusterTemplate, ClusterTemplateVersion
from app.tenants.models import Membership, Tenant
from app.workqueue import CLUSTERS, enqueue

_seq = itertools.count(1)


def user(db: Session, email: str | None = None, *, admin: bool = False, **fields: object) -> User:
    n = next(_seq)
    fields.setdefault("issuer", "http://idp.test")
    fields.setdefault("subject", f"sub-{n}")
    fields.setdefault("email_verified", True)
    row = User(email=email or f"user{n}@example.com", name=f"User {n}",
               is_platform_admin=admin, **fields)
    db.add(row)
    db.flush()
    return row


def tenant(db: Session, slug: str | None = None, **fields: object) -> Tenant:
    slug = slug or f"tenant-{next(_seq)}"
    row = Tenant(slug=slug, display_name=str(fields.pop("display_name", slug.title())), **fields)
    db.add(row)
    db.flush()
    return row


def membership(db: Session, tenant_row: Tenant, user_row: User, role: str = "member") -> Membership:
    row = Membership(tenant_id=tenant_row.id, user_id=user_row.id, role=role)
    db.add(row)
    db.flush()
    return row


def host_cluster(db: Session, name: str | None = None, region: str = "") -> HostCluster:
    row = HostCluster(name=name or f"host-{next(_seq)}", region=region, is_default=False)
    db.add(row)
    db.flush()
    return row


def env_host(db: Session) -> HostCluster:
    """The environment's host (PORTAL_KUBECONFIG's, which migration 0009 registers on an
    install in use): the one a connector without per-host clients reaches."""
    found = db.scalar(select(HostCluster).where(HostCluster.is_default.is_(True)))
    if found is not None:
        return found
    row = host_cluster(db, "default")
    row.is_default = True
    db.flush()
    return row


def registered_host(db: Session, name: str, region: str = "", *,
                    webhook: bool = True) -> HostCluster:
    """A host an admin registered with a kubeconfig (a placeholder one, sealed with the test
    settings' key) and, unless ``webhook`` is False, a webhook URL: placement offers it;
    connecting to it needs a connector that knows it."""
    row = host_cluster(db, name, region=region)
    row.credential_kind = "kubeconfig"
    if webhook:
        row.webhook_url = f"https://webhook.{name}.example:9443"
    box = SecretBox.from_settings(Settings(env="test", database_url="sqlite://"))
    row.credentials_encrypted = box.seal("apiVersion: v1\nkind: Config\n")
    db.flush()
    return row


def gpu_class(db: Session, product: str = "NVIDIA-H100-80GB-HBM3", **fields: object) -> GpuClass:
    row = GpuClass(product=product, display_name=str(fields.pop("display_name", product)),
                   memory_mib=int(str(fields.pop("memory_mib", 81559))), **fields)
    db.add(row)
    db.flush()
    return row


def node(db: Session, host: HostCluster, gpu: GpuClass | None, name: str | None = None,
         gpu_count: int = 8, **fields: object) -> Node:
    fields.setdefault("ready", True)
    row = Node(host_cluster_id=host.id, name=name or f"node-{next(_seq)}",
               gpu_class_id=gpu.id if gpu else None, gpu_count=gpu_count, **fields)
    db.add(row)
    db.flush()
    return row


def machine(db: Session, host: HostCluster, gpu: GpuClass, name: str | None = None, *,
            password: str = "bmc-password", key: str | None = None,  # noqa: S107
            **fields: object) -> Machine:
    """A machine registered in the pool, its BMC credentials sealed with ``key`` (else the test
    settings' key)."""
    box = SecretBox(key) if key else SecretBox.from_settings(
        Settings(env="test", database_url="sqlite://"))
    fields.setdefault("bmc_address", "redfish+http://10.0.0.9/redfish/v1/Systems/1")
    fields.setdefault("boot_mac", "0c:c4:7a:00:00:01")
    fields.setdefault("gpu_count", 8)
    fields.setdefault("desired", "pool")
    fields.setdefault("phase", "registering")
    row = Machine(name=name or f"machine-{next(_seq)}", host_cluster_id=host.id,
                  gpu_class_id=gpu.id, reason="", provisioning_state="", generation=1,
                  observed_generation=0, conditions=[],
                  bmc_credentials_encrypted=box.seal(
                      json.dumps({"username": "admin", "password": password})), **fields)
    db.add(row)
    db.flush()
    return row


def assignment(db: Session, node_row: Node, tenant_row: Tenant) -> NodeAssignment:
    row = NodeAssignment(node_id=node_row.id, tenant_id=tenant_row.id)
    db.add(row)
    db.flush()
    return row


def quota(db: Session, tenant_row: Tenant, gpu: GpuClass, gpus: int,
          region: str = "") -> TenantQuota:
    row = TenantQuota(tenant_id=tenant_row.id, gpu_class_id=gpu.id, gpus=gpus, region=region)
    db.add(row)
    db.flush()
    return row


def cluster(db: Session, tenant_row: Tenant, host: HostCluster, name: str = "train",
            **fields: object) -> VirtualCluster:
    fields.setdefault("kubernetes_version", "1.32.4")
    fields.setdefault("placement", "shared-pool")
    row = VirtualCluster(tenant_id=tenant_row.id, host_cluster_id=host.id, name=name, **fields)
    db.add(row)
    db.flush()
    enqueue(db, CLUSTERS, row.id)  # as the service does: the worker takes it up at once
    return row


def quota_request(db: Session, tenant_row: Tenant, gpu: GpuClass, requester: User | None = None,
                  gpus: int = 8, state: str = "pending", region: str = "") -> QuotaRequest:
    row = QuotaRequest(tenant_id=tenant_row.id, gpu_class_id=gpu.id, gpus=gpus, state=state,
                       region=region,
                       requested_by_id=requester.id if requester else None)
    db.add(row)
    db.flush()
    return row


PASSED = {"passed": True, "checks": []}


def cluster_template(db: Session, name: str | None = None,
                     description: str = "") -> ClusterTemplate:
    row = ClusterTemplate(name=name or f"template-{next(_seq)}", description=description)
    db.add(row)
    db.flush()
    return row


def template_version(db: Session, template: ClusterTemplate, version: int = 1, *,
                     state: str = "offered", **settings: object) -> ClusterTemplateVersion:
    """A version with the given settings (all open by default); an offered one has passed."""
    settings.setdefault("validation", PASSED if state == "offered" else None)
    row = ClusterTemplateVersion(template_id=template.id, version=version, state=state,
                                 **settings)
    db.add(row)
    db.flush()
    return row


def default_template_version(db: Session, version: int = 1) -> ClusterTemplateVersion:
    """A version of the built-in "default" template that migration 0007 makes."""
    template = db.scalar(select(ClusterTemplate).where(ClusterTemplate.name == "default"))
    assert template is not None, "the database was not migrated to 0007"
    row = db.scalar(select(ClusterTemplateVersion).where(
        ClusterTemplateVersion.template_id == template.id,
        ClusterTemplateVersion.version == version))
    return row if row is not None else template_version(db, template, version)


def gpu_tenant(db: Session, slug: str, gpus: int,
               product: str = "NVIDIA-H100-80GB-HBM3") -> tuple[Tenant, Principal, GpuClass]:
    """A tenant with an admin (as the principal that acts) and ``gpus`` approved of a class."""
    row = tenant(db, slug, display_name=f"Tenant {slug}")
    admin = user(db)
    membership(db, row, admin, "admin")
    gpu = gpu_class(db, product)
    quota(db, row, gpu, gpus)
    return row, Principal(user=admin, via="token", roles={row.id: "admin"}), gpu
