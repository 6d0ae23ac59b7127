"""A small tenancy for tenant and quota tests: tenant ``acme`` with every role, a rival tenant,
a platform admin and a GPU class with 64 GPUs on eight nodes."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.auth.models import User
from app.auth.principal import Principal
from app.gpu_classes.models import GpuClass
from app.tenants.models import Membership, Tenant
from tests import factories
from tests.support import oidc
from tests.support.principals import bearer


@dataclass
class Tenancy:
    acme: Tenant
    globex: Tenant
    platform_admin: User
    acme_admin: User
    acme_member: User
    acme_viewer: User
    globex_admin: User
    h100: GpuClass
    memberships: list[Membership]

    def principal(self, user: User) -> Principal:
        """The caller as the request would build it, for calling services directly."""
        roles = {m.tenant_id: m.role for m in self.memberships if m.user_id == user.id}
        return Principal(user=user, via="token", roles=roles)


def build_tenancy(db: Session, nodes: int = 8, gpus_per_node: int = 8) -> Tenancy:
    acme, globex = factories.tenant(db, "acme"), factories.tenant(db, "globex")
    users = {name: factories.user(db, f"{name}@example.com") for name in
             ("platform-admin", "acme-admin", "acme-member", "acme-viewer", "globex-admin")}
    users["platform-admin"].is_platform_admin = True
    memberships = [
        factories.membership(db, acme, users["acme-admin"], "admin"),
        factories.membership(db, acme, users["acme-member"], "member"),
        factories.membership(db, acme, users["acme-viewer"], "viewer"),
        factories.membership(db, globex, users["globex-admin"], "admin"),
    ]
    h100 = factories.gpu_class(db, display_name="H100 80GB")
    host = factories.env_host(db)
    for _ in range(nodes):
        factories.node(db, host, h100, gpu_count=gpus_per_node)
    db.flush()
    return Tenancy(acme=acme, globex=globex, platform_admin=users["platform-admin"],
                   acme_admin=users["acme-admin"], acme_member=users["acme-member"],
                   acme_viewer=users["acme-viewer"], globex_admin=users["globex-admin"],
                   h100=h100, memberships=memberships)


def headers(db: Session, user: User, *scopes: str) -> dict[str, str]:
    return bearer(db, user, *scopes)


def signed_in_admin_of(client: TestClient, db: Session, oidc_issuer: str,
                       tenant: Tenant) -> User:
    """A tenant admin signed in through the local provider: a browser's session on ``client``."""
    email = f"admin-{tenant.slug}@example.com"
    user = User(email=email, name="")
    db.add(user)
    db.flush()
    factories.membership(db, tenant, user, "admin")
    db.commit()
    oidc.register_user(oidc_issuer, email)
    oidc.sign_in(client, email)
    return user
