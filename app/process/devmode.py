"""The embedded default: a local OIDC provider with demo users, demo data, and a simulated
host cluster unless a real one is configured.

Only for ``portal dev`` and tests; production points PORTAL_OIDC_ISSUER at a real IdP and
PORTAL_KUBECONFIG (or in-cluster config) at a real host.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import flask
import werkzeug.serving
from authlib.deprecate import AuthlibDeprecationWarning
from jinja2 import BaseLoader, ChoiceLoader, FileSystemLoader
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.auth import service as auth_service
from app.clusters import repository as cluster_repository
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.kube.connector import real_host_configured
from app.kube.simulated import SIMULATED_ENDPOINT_TEMPLATE, SimulatedHost, demo_nodes
from app.tenants.models import Membership, Tenant
from app.web.templating import STATIC_DIR, TEMPLATES_DIR
from app.workqueue import (
    CLUSTERS,
    NODES,
    PLATFORM_OBJECTS,
    TENANT_QUEUES,
    enqueue_many,
    tenant_queue_key,
)

# The local demo IdP (oidc-provider-mock, development only) imports authlib.jose and Authlib's
# httpx client, which Authlib deprecates (see app.auth.oidc for httpx): the causes are in that
# package and in the stack's pinned httpx, so only those two warnings of its import are silenced.
with warnings.catch_warnings():
    for message in ("authlib.jose module is deprecated", "The httpx module is deprecated"):
        warnings.filterwarnings("ignore", message=message, category=AuthlibDeprecationWarning)
    import oidc_provider_mock

DEMO_ADMIN = "admin@example.com"
DEMO_TENANT_ADMIN = "alice@example.com"
DEMO_MEMBER = "bob@example.com"
DEMO_TENANT = "demo"


def demo_users(admin_group: str) -> list[oidc_provider_mock.User]:
    return [
        oidc_provider_mock.User(
            sub=DEMO_ADMIN,
            claims={"email": DEMO_ADMIN, "name": "Ada Admin", "groups": [admin_group]},
        ),
        oidc_provider_mock.User(
            sub=DEMO_TENANT_ADMIN,
            claims={"email": DEMO_TENANT_ADMIN, "name": "Alice Example", "groups": ["demo"]},
        ),
        oidc_provider_mock.User(
            sub=DEMO_MEMBER,
            claims={"email": DEMO_MEMBER, "name": "Bob Example", "groups": ["demo"]},
        ),
    ]


@contextmanager
def local_oidc_provider(
    users: list[oidc_provider_mock.User], host: str = "127.0.0.1", port: int = 0
) -> Iterator[str]:
    """Serves a real OIDC provider on loopback; yields its issuer URL."""
    app = local_oidc_app(users)
    server = werkzeug.serving.make_server(host, port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True, name="local-oidc")
    thread.start()
    try:
        yield f"http://{host}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def local_oidc_app(users: list[oidc_provider_mock.User]) -> flask.Flask:
    """The provider, its page styled without internet: its template links Pico CSS from a CDN,
    ours (``templates/local_idp/``) the same file vendored from npm, from its own /static."""
    app: flask.Flask = oidc_provider_mock.app(user_claims=users, require_nonce=True)
    app.static_folder = str(STATIC_DIR)
    loaders: list[BaseLoader] = [FileSystemLoader(TEMPLATES_DIR / "local_idp")]
    if app.jinja_loader is not None:
        loaders.append(app.jinja_loader)  # the provider's own templates, for the rest
    app.jinja_loader = ChoiceLoader(loaders)
    return app


def simulated_host_for(settings: Settings, *, simulate: bool) -> SimulatedHost | None:
    """The simulated host ``portal dev`` runs on, unless turned off or a real host is set."""
    if not simulate or real_host_configured(settings):
        return None
    return SimulatedHost(demo_nodes(), startup_seconds=settings.simulated_startup_seconds)


def check_clusters_on_the_new_host(db: Session) -> None:
    """A simulated host starts empty each run: its nodes and every cluster are checked at once,
    so the worker rebuilds what the database says exists (as it would repair a real host that
    lost it)."""
    hosts = list(db.scalars(select(HostCluster.id)))
    enqueue_many(db, NODES, hosts)
    enqueue_many(db, PLATFORM_OBJECTS, hosts)
    enqueue_many(db, TENANT_QUEUES, [tenant_queue_key(tenant, host) for tenant, host
                                     in cluster_repository.tenant_hosts(db)])
    enqueue_many(db, CLUSTERS, cluster_repository.every_cluster_id(db))


def dev_settings(base: Settings, *, database_url: str, issuer: str,
                 simulated: bool) -> Settings:
    """``portal dev``'s settings; on the simulated host, endpoints no client can reach."""
    update: dict[str, object] = {"database_url": database_url, "oidc_issuer": issuer,
                                 "simulated_host": simulated}
    if simulated:
        update["cluster_endpoint_template"] = SIMULATED_ENDPOINT_TEMPLATE
    return base.model_copy(update=update)


def seed_demo(db: Session) -> None:
    """Idempotent demo data: one host cluster, a demo tenant and its admin and member."""
    if db.scalar(select(HostCluster).where(HostCluster.is_default)) is None:
        db.add(HostCluster(name="local", region="dev", is_default=True))
    if db.scalar(select(GpuClass).limit(1)) is None:
        # Until an inventory sync finds real nodes, one declared class lets quota be tried out.
        db.add(GpuClass(product="NVIDIA-H100-80GB-HBM3", display_name="H100 80GB",
                        memory_mib=81559, declared_by_admin=True))
    tenant = db.scalar(select(Tenant).where(Tenant.slug == DEMO_TENANT))
    if tenant is None:
        tenant = Tenant(slug=DEMO_TENANT, display_name="Demo Research")
        db.add(tenant)
        db.flush()
        audit.record(db, action="tenant.create", actor_id=None, actor_label="portal dev",
                     tenant_id=tenant.id, target_type="tenant", target_id=tenant.slug,
                     target_label=readable.tenant_label(tenant.slug, tenant.display_name),
                     after={"slug": tenant.slug, "display_name": tenant.display_name})
    for email, role in ((DEMO_TENANT_ADMIN, "admin"), (DEMO_MEMBER, "member")):
        user = auth_service.user_for_email(db, email)
        exists = db.scalar(select(Membership).where(
            Membership.tenant_id == tenant.id, Membership.user_id == user.id))
        if exists is None:
            db.add(Membership(tenant_id=tenant.id, user_id=user.id, role=role))
