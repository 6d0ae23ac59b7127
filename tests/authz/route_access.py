"""Who may call each route: the table the authorization matrix test walks.

Every route of the app needs an entry here; a route without one fails the matrix test.
Path parameters are filled from the ``World`` the matrix test builds (tenant ``acme`` with a
viewer, a member and an admin; tenant ``globex`` with its own admin; a platform admin), via
``params``: a function from the world to the path values. ``body`` is a valid JSON body (or
form fields for web routes, which also get the CSRF token), so that an allowed caller reaches
the service rather than failing validation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from tests.authz.world import HOST_CA, HOST_KUBECONFIG

if TYPE_CHECKING:
    from tests.authz.world import World


class Access(Enum):
    PUBLIC = "anyone, signed in or not"
    SIGNED_IN = "any signed-in user"
    TENANT_VIEWER = "viewer, member or admin of the tenant, or a platform admin"
    TENANT_MEMBER = "member or admin of the tenant, or a platform admin"
    TENANT_ADMIN = "admin of the tenant, or a platform admin"
    PLATFORM_ADMIN = "platform admins only"
    ANY_TENANT_ADMIN = "an admin of some tenant (sees that tenant's rows), or a platform admin"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    access: Access
    params: Callable[[World], dict[str, Any]] = field(default=lambda _world: {})
    body: Callable[[World], dict[str, Any]] | None = None
    # Statuses an allowed caller may get besides 2xx/3xx (e.g. 409 for a second approval).
    also_ok: tuple[int, ...] = ()


def acme(world: World) -> dict[str, Any]:
    return {"tenant": "acme"}


ROUTES: list[Route] = [
    Route("GET", "/", Access.PUBLIC),
    Route("GET", "/healthz", Access.PUBLIC),
    Route("GET", "/readyz", Access.PUBLIC),
    # Scrapers only, with PORTAL_METRICS_TOKEN (tests/http/test_metrics.py); none configured
    # here, so the path does not exist for anyone.
    Route("GET", "/metrics", Access.PUBLIC, also_ok=(404,)),
    Route("GET", "/favicon.ico", Access.PUBLIC),
    Route("GET", "/auth/login", Access.PUBLIC),
    Route("GET", "/auth/callback", Access.PUBLIC, also_ok=(400,)),
    # Anonymous callers have no session, hence no CSRF token to send: 403.
    Route("POST", "/auth/logout", Access.PUBLIC, also_ok=(403,)),
    Route("GET", "/api/v1/me", Access.SIGNED_IN),
    Route("GET", "/openapi.json", Access.PUBLIC),
    # The caller's own API tokens; world.current names the caller, whose token is revoked.
    Route("GET", "/api/v1/tokens", Access.SIGNED_IN),
    Route("POST", "/api/v1/tokens", Access.SIGNED_IN,
          body=lambda w: {"name": "ci", "scopes": ["read"], "expires_in_days": 7}),
    Route("DELETE", "/api/v1/tokens/current", Access.SIGNED_IN),  # revokes the caller's own
    Route("DELETE", "/api/v1/tokens/{token_id}", Access.SIGNED_IN,
          params=lambda w: {"token_id": w.spare_token_ids.get(w.current, 0)}),
    Route("GET", "/tokens", Access.SIGNED_IN),
    Route("POST", "/tokens", Access.SIGNED_IN,
          body=lambda w: {"name": "ci", "scopes": "read", "expires_in_days": "7"}),
    Route("POST", "/tokens/{token_id}/revoke", Access.SIGNED_IN,
          params=lambda w: {"token_id": w.spare_token_ids.get(w.current, 0)}),
    # The caller's own notification preferences: a kind every user receives, turned off.
    Route("GET", "/api/v1/me/notification-preferences", Access.SIGNED_IN),
    Route("PUT", "/api/v1/me/notification-preferences", Access.SIGNED_IN,
          body=lambda w: {"preferences": [{"kind": "kubeconfig.expiring", "email": False}]}),
    Route("GET", "/account/notifications", Access.SIGNED_IN),
    Route("POST", "/account/notifications", Access.SIGNED_IN,
          body=lambda w: {"kinds": "kubeconfig.expiring"}),
    # portalctl login in a browser (without portalctl's query, the page says how to start it);
    # tests/auth/test_cli_login.py covers the rest.
    Route("GET", "/cli/login", Access.SIGNED_IN),
    Route("POST", "/cli/login", Access.SIGNED_IN,
          body=lambda w: {"port": "54321", "state": "s" * 43, "name": "portalctl",
                          "expires_in_days": "7", "decision": "create"}),
    Route("GET", "/api/v1/tenants/{tenant}/group-mappings", Access.TENANT_ADMIN, params=acme),
    Route("POST", "/api/v1/tenants/{tenant}/group-mappings", Access.PLATFORM_ADMIN,
          params=acme, body=lambda w: {"group": "acme-researchers", "role": "member"}),
    Route("DELETE", "/api/v1/tenants/{tenant}/group-mappings/{mapping_id}",
          Access.PLATFORM_ADMIN, params=lambda w: {"tenant": "acme", "mapping_id": w.mapping_id}),
    Route("GET", "/api/v1/audit", Access.ANY_TENANT_ADMIN),
    Route("GET", "/audit", Access.ANY_TENANT_ADMIN),
    Route("GET", "/docs", Access.PUBLIC),
    Route("GET", "/redoc", Access.PUBLIC),
]

# Tenants, members, GPU classes and quota (issue 4). World attributes these entries use:
# world.acme_member_id (the Membership id of acme's member), world.pending_request_id (a pending
# quota request of acme for 2 GPUs), world.gpu_class_id (NVIDIA-H100-80GB-HBM3). That class has
# no nodes while acme already holds 8 GPUs of it, so approvals carry overcommit to succeed.


def acme_member(world: World) -> dict[str, Any]:
    return {"tenant": "acme", "member_id": world.acme_member_id}


def acme_request(world: World) -> dict[str, Any]:
    return {"tenant": "acme", "request_id": world.pending_request_id}


def pending_request(world: World) -> dict[str, Any]:
    return {"request_id": world.pending_request_id}


def gpu_class(world: World) -> dict[str, Any]:
    return {"class_id": world.gpu_class_id}


def quota_request_body(world: World) -> dict[str, Any]:
    # The world's hosts span regions: a request names one.
    return {"gpu_class_id": world.gpu_class_id, "gpus": 4, "reason": "training",
            "region": "eu-west"}


ROUTES += [
    Route("GET", "/api/v1/tenants", Access.SIGNED_IN),
    Route("POST", "/api/v1/tenants", Access.PLATFORM_ADMIN,
          body=lambda _w: {"slug": "initech", "display_name": "Initech"}),
    Route("GET", "/api/v1/tenants/{tenant}", Access.TENANT_VIEWER, params=acme),
    Route("PATCH", "/api/v1/tenants/{tenant}", Access.PLATFORM_ADMIN, params=acme,
          body=lambda _w: {"display_name": "Acme Corp"}),
    Route("GET", "/api/v1/tenants/{tenant}/members", Access.TENANT_VIEWER, params=acme),
    Route("POST", "/api/v1/tenants/{tenant}/members", Access.TENANT_ADMIN, params=acme,
          body=lambda _w: {"email": "new-member@example.com", "role": "member"}),
    Route("PATCH", "/api/v1/tenants/{tenant}/members/{member_id}", Access.TENANT_ADMIN,
          params=acme_member, body=lambda _w: {"role": "viewer"}),
    Route("DELETE", "/api/v1/tenants/{tenant}/members/{member_id}", Access.TENANT_ADMIN,
          params=acme_member),
    Route("GET", "/api/v1/tenants/{tenant}/quota", Access.TENANT_VIEWER, params=acme),
    Route("GET", "/api/v1/tenants/{tenant}/limits", Access.TENANT_VIEWER, params=acme),
    Route("GET", "/api/v1/tenants/{tenant}/burst-policy", Access.TENANT_VIEWER, params=acme),
    Route("PUT", "/api/v1/tenants/{tenant}/burst-policy", Access.PLATFORM_ADMIN, params=acme,
          body=lambda _w: {"tier": "burst", "burst_gpus": 4}),
    Route("GET", "/api/v1/tenants/{tenant}/quota-requests", Access.TENANT_VIEWER, params=acme),
    Route("POST", "/api/v1/tenants/{tenant}/quota-requests", Access.TENANT_ADMIN, params=acme,
          body=quota_request_body),
    Route("POST", "/api/v1/tenants/{tenant}/quota-requests/{request_id}/cancel",
          Access.TENANT_ADMIN, params=acme_request),
    Route("GET", "/api/v1/quota-requests", Access.PLATFORM_ADMIN),
    Route("POST", "/api/v1/quota-requests/{request_id}/approve", Access.PLATFORM_ADMIN,
          params=pending_request, body=lambda _w: {"gpus": 2, "note": "ok", "overcommit": True}),
    Route("POST", "/api/v1/quota-requests/{request_id}/reject", Access.PLATFORM_ADMIN,
          params=pending_request, body=lambda _w: {"note": "no"}),
    Route("GET", "/api/v1/gpu-classes", Access.SIGNED_IN),
    Route("POST", "/api/v1/gpu-classes", Access.PLATFORM_ADMIN,
          body=lambda _w: {"product": "NVIDIA-A100-SXM4-40GB", "display_name": "A100 40GB",
                          "memory_mib": 40960}),
    Route("PATCH", "/api/v1/gpu-classes/{class_id}", Access.PLATFORM_ADMIN, params=gpu_class,
          body=lambda _w: {"display_name": "H100"}),
    # Web pages and their htmx endpoints (form fields, CSRF added by the runner).
    Route("GET", "/t/{tenant}", Access.TENANT_VIEWER, params=acme),
    Route("GET", "/t/{tenant}/members", Access.TENANT_VIEWER, params=acme),
    Route("POST", "/t/{tenant}/members", Access.TENANT_ADMIN, params=acme,
          body=lambda _w: {"email": "new-member@example.com", "role": "member"}),
    Route("POST", "/t/{tenant}/members/{member_id}", Access.TENANT_ADMIN, params=acme_member,
          body=lambda _w: {"role": "viewer"}),
    Route("POST", "/t/{tenant}/members/{member_id}/remove", Access.TENANT_ADMIN,
          params=acme_member),
    Route("GET", "/t/{tenant}/quota-requests/new", Access.TENANT_ADMIN, params=acme),
    Route("POST", "/t/{tenant}/quota-requests/validate", Access.TENANT_ADMIN, params=acme,
          body=lambda w: {k: str(v) for k, v in quota_request_body(w).items()}),
    Route("POST", "/t/{tenant}/quota-requests", Access.TENANT_ADMIN, params=acme,
          body=lambda w: {k: str(v) for k, v in quota_request_body(w).items()}),
    Route("POST", "/t/{tenant}/quota-requests/{request_id}/cancel", Access.TENANT_ADMIN,
          params=acme_request),
    Route("GET", "/admin/quota-requests", Access.PLATFORM_ADMIN),
    Route("GET", "/live/admin/quota-requests", Access.PLATFORM_ADMIN),
    Route("POST", "/admin/quota-requests/{request_id}/approve", Access.PLATFORM_ADMIN,
          params=pending_request, body=lambda _w: {"gpus": "2", "overcommit": "on"}),
    Route("POST", "/admin/quota-requests/{request_id}/reject", Access.PLATFORM_ADMIN,
          params=pending_request, body=lambda _w: {"note": "no"}),
    Route("GET", "/admin/tenants", Access.PLATFORM_ADMIN),
    Route("POST", "/admin/tenants", Access.PLATFORM_ADMIN,
          body=lambda _w: {"slug": "initech", "display_name": "Initech"}),
    Route("POST", "/admin/tenants/{tenant}/burst-policy", Access.PLATFORM_ADMIN, params=acme,
          body=lambda _w: {"tier": "burst", "burst_gpus": "4"}),
    Route("POST", "/admin/tenants/{tenant}/burst-policy/check", Access.PLATFORM_ADMIN,
          params=acme, body=lambda _w: {"tier": "burst", "no_ceiling": "on"}),
    Route("POST", "/admin/tenants/{tenant}", Access.PLATFORM_ADMIN, params=acme,
          body=lambda _w: {"state": "suspended"}),
    Route("GET", "/admin/gpu-classes", Access.PLATFORM_ADMIN),
    Route("POST", "/admin/gpu-classes", Access.PLATFORM_ADMIN,
          body=lambda _w: {"product": "NVIDIA-A100-SXM4-40GB", "display_name": "A100 40GB"}),
    Route("POST", "/admin/gpu-classes/{class_id}", Access.PLATFORM_ADMIN, params=gpu_class,
          body=lambda _w: {"display_name": "H100"}),
]

# Kubeconfigs (issue 7). world.kubeconfig_cluster is a Ready cluster of acme (its virtual API is
# an in-memory fake in the matrix); world.grant_id is a live grant of acme's member on it, so
# its revocation is for that member and tenant admins, and a viewer is refused with 403.


def acme_kubeconfigs(world: World) -> dict[str, Any]:
    return {"tenant": "acme", "cluster": world.kubeconfig_cluster}


def acme_grant(world: World) -> dict[str, Any]:
    return {**acme_kubeconfigs(world), "grant_id": world.grant_id}


KUBECONFIGS = "/api/v1/tenants/{tenant}/clusters/{cluster}/kubeconfigs"
KUBECONFIG_PANEL = "/t/{tenant}/clusters/{cluster}/kubeconfigs"

ROUTES += [
    Route("POST", KUBECONFIGS, Access.TENANT_VIEWER, params=acme_kubeconfigs,
          body=lambda _w: {"role": "view", "lifetime_seconds": 3600}),
    Route("GET", KUBECONFIGS, Access.TENANT_VIEWER, params=acme_kubeconfigs),
    Route("DELETE", KUBECONFIGS + "/{grant_id}", Access.TENANT_MEMBER, params=acme_grant),
    # The same grant by its id alone: acme's member and admin, a platform admin; acme's viewer
    # 403, globex's admin 404.
    Route("DELETE", "/api/v1/kubeconfig-grants/{grant_id}", Access.TENANT_MEMBER,
          params=lambda w: {"grant_id": w.grant_id}),
    Route("GET", KUBECONFIG_PANEL, Access.TENANT_VIEWER, params=acme_kubeconfigs),
    Route("POST", KUBECONFIG_PANEL, Access.TENANT_VIEWER, params=acme_kubeconfigs,
          body=lambda _w: {"role": "view", "lifetime_seconds": "3600"}),
    # Asks in the page whether to revoke: changes nothing, so whoever sees the panel may ask.
    Route("GET", KUBECONFIG_PANEL + "/{grant_id}/revoke", Access.TENANT_VIEWER,
          params=acme_grant),
    Route("POST", KUBECONFIG_PANEL + "/{grant_id}/revoke", Access.TENANT_MEMBER,
          params=acme_grant),
]

# Nodes (issue 5). world.free_node is a free H100 node that fits acme's quota of 8;
# world.assigned_node is dedicated to globex.


def free_node(world: World) -> dict[str, Any]:
    return {"node": world.free_node}


def assigned_node(world: World) -> dict[str, Any]:
    return {"node": world.assigned_node}


def suggestion_body(world: World) -> dict[str, Any]:
    return {"tenant": "acme", "gpu_class": "NVIDIA-H100-80GB-HBM3", "gpus": 8}


ROUTES += [
    Route("GET", "/api/v1/nodes", Access.PLATFORM_ADMIN),
    Route("GET", "/api/v1/nodes/{node}", Access.PLATFORM_ADMIN, params=free_node),
    Route("PUT", "/api/v1/nodes/{node}/assignment", Access.PLATFORM_ADMIN, params=free_node,
          body=lambda _w: {"tenant": "acme"}),
    Route("DELETE", "/api/v1/nodes/{node}/assignment", Access.PLATFORM_ADMIN,
          params=assigned_node),
    Route("POST", "/api/v1/node-suggestions", Access.PLATFORM_ADMIN, body=suggestion_body),
    Route("GET", "/api/v1/tenants/{tenant}/nodes", Access.TENANT_VIEWER, params=acme),
    Route("GET", "/admin/fleet", Access.PLATFORM_ADMIN),
    Route("GET", "/admin/fleet/hosts", Access.PLATFORM_ADMIN),
    Route("GET", "/api/v1/fleet/capacity", Access.PLATFORM_ADMIN),
    Route("GET", "/admin/fleet/sleep", Access.PLATFORM_ADMIN),
    Route("GET", "/api/v1/fleet/sleep", Access.PLATFORM_ADMIN),
    Route("GET", "/admin/fleet/sleeping", Access.PLATFORM_ADMIN),
    Route("GET", "/api/v1/admin/sleeping-clusters", Access.PLATFORM_ADMIN),
    Route("GET", "/admin/nodes/{node}", Access.PLATFORM_ADMIN, params=free_node),
    Route("GET", "/live/admin/fleet", Access.PLATFORM_ADMIN),
    Route("GET", "/live/admin/nodes/{node}", Access.PLATFORM_ADMIN, params=free_node),
    Route("POST", "/admin/nodes/{node}/assignment", Access.PLATFORM_ADMIN, params=free_node,
          body=lambda _w: {"tenant": "acme"}),
    Route("POST", "/admin/nodes/{node}/assignment/end", Access.PLATFORM_ADMIN,
          params=assigned_node, body=lambda w: {"confirm_name": w.assigned_node}),
    Route("GET", "/admin/fleet/suggest", Access.PLATFORM_ADMIN),
    Route("POST", "/admin/fleet/suggest", Access.PLATFORM_ADMIN,
          body=lambda w: {k: str(v) for k, v in suggestion_body(w).items()}),
    Route("POST", "/admin/fleet/assignments", Access.PLATFORM_ADMIN,
          body=lambda w: {"tenant": "acme", "node": w.free_node}),
    Route("GET", "/t/{tenant}/nodes", Access.TENANT_VIEWER, params=acme),
]

# Virtual clusters (issue 6): acme's Ready cluster world.cluster_name ("train", 4 of acme's 8
# H100s), so a new cluster of 2 GPUs and a resize to 4 fit the quota.


def acme_cluster(world: World) -> dict[str, Any]:
    return {"tenant": "acme", "cluster": world.cluster_name}


def cluster_body(world: World) -> dict[str, Any]:
    return {"name": "infer", "kubernetes_version": "1.32.4", "placement": "shared-pool",
            "gpu_class_id": world.gpu_class_id, "gpus": 2, "cpu_millicores": 8000,
            "memory_mib": 32768}


ROUTES += [
    Route("GET", "/api/v1/tenants/{tenant}/clusters", Access.TENANT_VIEWER, params=acme),
    Route("POST", "/api/v1/tenants/{tenant}/clusters", Access.TENANT_ADMIN, params=acme,
          body=cluster_body),
    Route("GET", "/api/v1/tenants/{tenant}/clusters/{cluster}", Access.TENANT_VIEWER,
          params=acme_cluster),
    Route("PATCH", "/api/v1/tenants/{tenant}/clusters/{cluster}", Access.TENANT_ADMIN,
          params=acme_cluster, body=lambda _w: {"gpus": 2}),
    Route("DELETE", "/api/v1/tenants/{tenant}/clusters/{cluster}", Access.TENANT_ADMIN,
          params=acme_cluster),
    Route("GET", "/api/v1/tenants/{tenant}/clusters/{cluster}/manifests", Access.TENANT_VIEWER,
          params=acme_cluster),
    Route("POST", "/api/v1/tenants/{tenant}/clusters/{cluster}/sleep", Access.TENANT_ADMIN,
          params=acme_cluster),
    Route("POST", "/api/v1/tenants/{tenant}/clusters/{cluster}/wake", Access.TENANT_ADMIN,
          params=acme_cluster),
    Route("PUT", "/api/v1/tenants/{tenant}/clusters/{cluster}/sleep-policy", Access.TENANT_ADMIN,
          params=acme_cluster, body=lambda _w: {"sleep_after_idle_minutes": 60,
                                                "sleep_timezone": "UTC"}),
    Route("GET", "/t/{tenant}/clusters", Access.TENANT_VIEWER, params=acme),
    Route("POST", "/t/{tenant}/clusters/validate", Access.TENANT_ADMIN, params=acme,
          body=lambda w: {k: str(v) for k, v in cluster_body(w).items()}),
    Route("POST", "/t/{tenant}/clusters", Access.TENANT_ADMIN, params=acme,
          body=lambda w: {k: str(v) for k, v in cluster_body(w).items()}),
    Route("GET", "/t/{tenant}/clusters/{cluster}", Access.TENANT_VIEWER, params=acme_cluster),
    Route("GET", "/t/{tenant}/clusters/{cluster}/status", Access.TENANT_VIEWER,
          params=acme_cluster),
    Route("GET", "/live/t/{tenant}/clusters/{cluster}", Access.TENANT_VIEWER,
          params=acme_cluster),
    Route("POST", "/t/{tenant}/clusters/{cluster}/resize", Access.TENANT_ADMIN,
          params=acme_cluster, body=lambda _w: {"gpus": "2", "cpu_millicores": "4000",
                                                "memory_mib": "16384"}),
    Route("POST", "/t/{tenant}/clusters/{cluster}/delete", Access.TENANT_ADMIN,
          params=acme_cluster, body=lambda w: {"confirm_name": w.cluster_name}),
    Route("POST", "/t/{tenant}/clusters/{cluster}/power", Access.TENANT_ADMIN,
          params=acme_cluster, body=lambda _w: {"power": "asleep"}),
    Route("POST", "/t/{tenant}/clusters/{cluster}/sleep-policy", Access.TENANT_ADMIN,
          params=acme_cluster, body=lambda _w: {"sleep_after_idle_minutes": "60",
                                                "sleep_timezone": "UTC"}),
    Route("POST", "/t/{tenant}/clusters/{cluster}/sleep-policy/check", Access.TENANT_ADMIN,
          params=acme_cluster, body=lambda _w: {"sleep_schedule": "daily",
                                                "sleep_timezone": "UTC"}),
]

# GPU usage (issue 15): without a tenant filter everyone signed in gets the tenants they see.
ROUTES += [
    Route("GET", "/api/v1/usage", Access.SIGNED_IN),
    Route("GET", "/api/v1/usage.csv", Access.SIGNED_IN),
    Route("GET", "/api/v1/usage/clusters", Access.SIGNED_IN),
    Route("GET", "/api/v1/usage/clusters.csv", Access.SIGNED_IN),
]
ROUTES += [
    Route("GET", "/usage", Access.SIGNED_IN),  # a redirect to the caller's usage page
    Route("GET", "/t/{tenant}/usage", Access.TENANT_VIEWER, params=acme),
    Route("GET", "/admin/usage", Access.PLATFORM_ADMIN),
]


# Cluster templates (issue 16): "matrix" has a draft v1 that passed validation; acme's "train"
# is on default v1 and default v2 is offered.


def matrix_template(world: World) -> dict[str, Any]:
    return {"name": world.template_name}


def matrix_v1(world: World) -> dict[str, Any]:
    return {"name": world.template_name, "version": 1}


TEMPLATES = "/api/v1/cluster-templates"
ADMIN_TEMPLATES = "/admin/cluster-templates"
ROUTES += [
    Route("GET", TEMPLATES, Access.SIGNED_IN),
    Route("POST", TEMPLATES, Access.PLATFORM_ADMIN, body=lambda _w: {"name": "new-one"}),
    Route("GET", TEMPLATES + "/{name}", Access.SIGNED_IN, params=lambda _w: {"name": "default"}),
    Route("POST", TEMPLATES + "/{name}/versions", Access.PLATFORM_ADMIN, params=matrix_template,
          body=lambda _w: {"max_gpus": 4}),
    Route("POST", TEMPLATES + "/{name}/versions/{version}/validate", Access.PLATFORM_ADMIN,
          params=matrix_v1),
    Route("POST", TEMPLATES + "/{name}/versions/{version}/offer", Access.PLATFORM_ADMIN,
          params=matrix_v1),
    Route("POST", TEMPLATES + "/{name}/versions/{version}/retire", Access.PLATFORM_ADMIN,
          params=matrix_v1),
    Route("POST", "/api/v1/tenants/{tenant}/clusters/{cluster}/template-upgrade",
          Access.TENANT_ADMIN, params=acme_cluster, body=lambda _w: {}),
    Route("GET", ADMIN_TEMPLATES, Access.PLATFORM_ADMIN),
    Route("POST", ADMIN_TEMPLATES, Access.PLATFORM_ADMIN, body=lambda _w: {"name": "web-one"}),
    Route("GET", ADMIN_TEMPLATES + "/{name}", Access.PLATFORM_ADMIN, params=matrix_template),
    Route("POST", ADMIN_TEMPLATES + "/{name}/versions", Access.PLATFORM_ADMIN,
          params=matrix_template, body=lambda _w: {"max_gpus": "4"}),
    Route("POST", ADMIN_TEMPLATES + "/{name}/versions/{version}/validate",
          Access.PLATFORM_ADMIN, params=matrix_v1),
    Route("GET", ADMIN_TEMPLATES + "/{name}/versions/{version}/validation",
          Access.PLATFORM_ADMIN, params=matrix_v1),
    Route("POST", ADMIN_TEMPLATES + "/{name}/versions/{version}/offer", Access.PLATFORM_ADMIN,
          params=matrix_v1),
    Route("POST", ADMIN_TEMPLATES + "/{name}/versions/{version}/retire", Access.PLATFORM_ADMIN,
          params=matrix_v1),
    Route("GET", "/t/{tenant}/clusters/{cluster}/template", Access.TENANT_VIEWER,
          params=acme_cluster),
    Route("POST", "/t/{tenant}/clusters/{cluster}/template-upgrade", Access.TENANT_ADMIN,
          params=acme_cluster),
]


# Host clusters (issue 17): "matrix-host" is registered with credentials, and nothing points
# at it, so it can be deleted.


def matrix_host(world: World) -> dict[str, Any]:
    return {"name": world.host_name}


def host_state(action: str) -> Callable[[World], dict[str, Any]]:
    return lambda world: {"name": world.host_name, "action": action}


def host_credentials(_world: World) -> dict[str, Any]:
    return {"kind": "token", "server": "https://matrix-host-2.invalid", "token": "t",
            "ca_certificate": HOST_CA.cert_pem.decode()}


def host_registration(_world: World) -> dict[str, Any]:
    return {"name": "new-host", "credentials": {"kind": "kubeconfig",
                                                "kubeconfig": HOST_KUBECONFIG}}


def host_form(_world: World) -> dict[str, Any]:
    return {"name": "web-host", "kind": "kubeconfig", "kubeconfig": HOST_KUBECONFIG}


HOSTS = "/api/v1/host-clusters"
ADMIN_HOSTS = "/admin/hosts"
ROUTES += [
    Route("GET", HOSTS, Access.PLATFORM_ADMIN),
    Route("POST", HOSTS, Access.PLATFORM_ADMIN, body=host_registration),
    Route("GET", HOSTS + "/{name}", Access.PLATFORM_ADMIN, params=matrix_host),
    Route("PATCH", HOSTS + "/{name}", Access.PLATFORM_ADMIN, params=matrix_host,
          body=lambda _w: {"description": "hall 2"}),
    Route("PUT", HOSTS + "/{name}/credentials", Access.PLATFORM_ADMIN, params=matrix_host,
          body=host_credentials),
    Route("POST", HOSTS + "/{name}/cordon", Access.PLATFORM_ADMIN, params=matrix_host,
          body=lambda _w: {"reason": "maintenance"}),
    Route("POST", HOSTS + "/{name}/uncordon", Access.PLATFORM_ADMIN, params=matrix_host,
          body=lambda _w: {"reason": "maintenance"}),
    Route("POST", HOSTS + "/{name}/drain", Access.PLATFORM_ADMIN, params=matrix_host,
          body=lambda _w: {"reason": "maintenance"}),
    Route("POST", HOSTS + "/{name}/check", Access.PLATFORM_ADMIN, params=matrix_host),
    Route("DELETE", HOSTS + "/{name}", Access.PLATFORM_ADMIN, params=matrix_host),
    Route("GET", ADMIN_HOSTS, Access.PLATFORM_ADMIN),
    Route("POST", ADMIN_HOSTS, Access.PLATFORM_ADMIN, body=host_form),
    Route("GET", ADMIN_HOSTS + "/{name}", Access.PLATFORM_ADMIN, params=matrix_host),
    Route("POST", ADMIN_HOSTS + "/{name}", Access.PLATFORM_ADMIN, params=matrix_host,
          body=lambda _w: {"name": "matrix-host", "description": "hall 2"}),
    Route("POST", ADMIN_HOSTS + "/{name}/credentials", Access.PLATFORM_ADMIN,
          params=matrix_host, body=host_credentials),
    Route("POST", ADMIN_HOSTS + "/{name}/state/{action}", Access.PLATFORM_ADMIN,
          params=host_state("cordon"), body=lambda _w: {"reason": "maintenance"}),
    Route("POST", ADMIN_HOSTS + "/{name}/check", Access.PLATFORM_ADMIN, params=matrix_host),
    Route("POST", ADMIN_HOSTS + "/{name}/delete", Access.PLATFORM_ADMIN, params=matrix_host),
]


def matrix_machine(world: World) -> dict[str, Any]:
    return {"name": world.machine_name}


def machine_registration(_world: World) -> dict[str, Any]:
    return {"name": "new-machine", "host_cluster": "default",
            "bmc_address": "ipmi://10.0.0.20", "boot_mac": "0C-C4-7A-00-00-20",
            "bmc": {"username": "admin", "password": "matrix-bmc-password"},
            "gpu_class": "NVIDIA-H100-80GB-HBM3", "gpu_count": 8}


def machine_form(world: World) -> dict[str, Any]:
    body = {k: v for k, v in machine_registration(world).items() if k != "bmc"}
    return {**body, "name": "web-machine", "bmc_username": "admin",
            "bmc_password": "matrix-bmc-password"}


BMC_CREDENTIALS = {"username": "root", "password": "rotated-bmc-password"}
MACHINES = "/api/v1/machines"
ADMIN_MACHINES = "/admin/machines"
ROUTES += [
    Route("GET", MACHINES, Access.PLATFORM_ADMIN),
    Route("POST", MACHINES, Access.PLATFORM_ADMIN, body=machine_registration),
    Route("GET", MACHINES + "/{name}", Access.PLATFORM_ADMIN, params=matrix_machine),
    Route("POST", MACHINES + "/{name}/provision", Access.PLATFORM_ADMIN, params=matrix_machine),
    Route("POST", MACHINES + "/{name}/release", Access.PLATFORM_ADMIN, params=matrix_machine),
    Route("PUT", MACHINES + "/{name}/bmc-credentials", Access.PLATFORM_ADMIN,
          params=matrix_machine, body=lambda _w: dict(BMC_CREDENTIALS)),
    Route("DELETE", MACHINES + "/{name}", Access.PLATFORM_ADMIN, params=matrix_machine),
    Route("GET", ADMIN_MACHINES, Access.PLATFORM_ADMIN),
    Route("POST", ADMIN_MACHINES, Access.PLATFORM_ADMIN, body=machine_form),
    Route("GET", ADMIN_MACHINES + "/{name}", Access.PLATFORM_ADMIN, params=matrix_machine),
    Route("POST", ADMIN_MACHINES + "/{name}/bmc-credentials", Access.PLATFORM_ADMIN,
          params=matrix_machine, body=lambda _w: {"bmc_username": "root",
                                                  "bmc_password": "rotated-bmc-password"}),
    Route("POST", ADMIN_MACHINES + "/{name}/{action}", Access.PLATFORM_ADMIN,
          params=lambda world: {"name": world.machine_name, "action": "provision"}),
]

# GPU utilisation (without PORTAL_PROMETHEUS_URL every figure unknown; who may look is the same).
ROUTES += [
    Route("GET", "/api/v1/tenants/{tenant}/clusters/{cluster}/utilisation", Access.TENANT_VIEWER,
          params=acme_cluster),
    Route("GET", "/api/v1/tenants/{tenant}/utilisation", Access.TENANT_VIEWER, params=acme),
    Route("GET", "/api/v1/admin/idle-gpus", Access.PLATFORM_ADMIN),
    Route("GET", "/t/{tenant}/clusters/{cluster}/utilisation", Access.TENANT_VIEWER,
          params=acme_cluster),
    Route("GET", "/admin/idle-gpus", Access.PLATFORM_ADMIN),
]

# Webhook endpoints (issue 60): acme's (its admins) and the platform's; a literal public
# address, so that registering it asks no DNS.
WEBHOOK_BODY = {"name": "matrix-new-hook", "url": "https://93.184.216.34/new"}
TENANT_WEBHOOKS = "/api/v1/tenants/{tenant}/webhooks"
ADMIN_WEBHOOKS = "/api/v1/admin/webhooks"


def acme_webhook(world: World) -> dict[str, Any]:
    return {"tenant": "acme", "endpoint_id": world.webhook_id}


def platform_webhook(world: World) -> dict[str, Any]:
    return {"endpoint_id": world.platform_webhook_id}


ROUTES += [
    Route("GET", TENANT_WEBHOOKS, Access.TENANT_ADMIN, params=acme),
    Route("POST", TENANT_WEBHOOKS, Access.TENANT_ADMIN, params=acme,
          body=lambda _w: dict(WEBHOOK_BODY, kinds=["cluster.ready"])),
    Route("GET", TENANT_WEBHOOKS + "/{endpoint_id}", Access.TENANT_ADMIN, params=acme_webhook),
    Route("PATCH", TENANT_WEBHOOKS + "/{endpoint_id}", Access.TENANT_ADMIN,
          params=acme_webhook, body=lambda _w: {"name": "matrix-renamed", "disabled": True}),
    Route("DELETE", TENANT_WEBHOOKS + "/{endpoint_id}", Access.TENANT_ADMIN,
          params=acme_webhook),
    Route("POST", TENANT_WEBHOOKS + "/{endpoint_id}/test", Access.TENANT_ADMIN,
          params=acme_webhook),
    Route("POST", TENANT_WEBHOOKS + "/{endpoint_id}/roll-secret", Access.TENANT_ADMIN,
          params=acme_webhook),
    Route("GET", ADMIN_WEBHOOKS, Access.PLATFORM_ADMIN),
    Route("POST", ADMIN_WEBHOOKS, Access.PLATFORM_ADMIN,
          body=lambda _w: dict(WEBHOOK_BODY, kinds=["host.unreachable"])),
    Route("GET", ADMIN_WEBHOOKS + "/{endpoint_id}", Access.PLATFORM_ADMIN,
          params=platform_webhook),
    Route("PATCH", ADMIN_WEBHOOKS + "/{endpoint_id}", Access.PLATFORM_ADMIN,
          params=platform_webhook, body=lambda _w: {"name": "matrix-renamed", "disabled": True}),
    Route("DELETE", ADMIN_WEBHOOKS + "/{endpoint_id}", Access.PLATFORM_ADMIN,
          params=platform_webhook),
    Route("POST", ADMIN_WEBHOOKS + "/{endpoint_id}/test", Access.PLATFORM_ADMIN,
          params=platform_webhook),
    Route("POST", ADMIN_WEBHOOKS + "/{endpoint_id}/roll-secret", Access.PLATFORM_ADMIN,
          params=platform_webhook),
    Route("GET", "/t/{tenant}/webhooks", Access.TENANT_ADMIN, params=acme),
    Route("POST", "/t/{tenant}/webhooks", Access.TENANT_ADMIN, params=acme,
          body=lambda _w: dict(WEBHOOK_BODY, format="cloudevents")),
    Route("POST", "/t/{tenant}/webhooks/{endpoint_id}", Access.TENANT_ADMIN,
          params=acme_webhook, body=lambda _w: {"disabled": "true"}),
    Route("POST", "/t/{tenant}/webhooks/{endpoint_id}/test", Access.TENANT_ADMIN,
          params=acme_webhook),
    Route("POST", "/t/{tenant}/webhooks/{endpoint_id}/roll-secret", Access.TENANT_ADMIN,
          params=acme_webhook),
    Route("POST", "/t/{tenant}/webhooks/{endpoint_id}/delete", Access.TENANT_ADMIN,
          params=acme_webhook),
    Route("GET", "/admin/webhooks", Access.PLATFORM_ADMIN),
    Route("POST", "/admin/webhooks", Access.PLATFORM_ADMIN,
          body=lambda _w: dict(WEBHOOK_BODY, format="cloudevents")),
    Route("POST", "/admin/webhooks/{endpoint_id}", Access.PLATFORM_ADMIN,
          params=platform_webhook, body=lambda _w: {"disabled": "true"}),
    Route("POST", "/admin/webhooks/{endpoint_id}/test", Access.PLATFORM_ADMIN,
          params=platform_webhook),
    Route("POST", "/admin/webhooks/{endpoint_id}/roll-secret", Access.PLATFORM_ADMIN,
          params=platform_webhook),
    Route("POST", "/admin/webhooks/{endpoint_id}/delete", Access.PLATFORM_ADMIN,
          params=platform_webhook),
]
