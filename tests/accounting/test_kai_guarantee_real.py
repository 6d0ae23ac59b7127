"""On the real host API server with KAI's Queue CRD: the tenant's KAI queue carries the shared
pool's guarantee of the one accounting (approved quota less dedicated GPUs), and follows a node's
dedication and its end within seconds; its shared-pool cluster's ResourceQuota keeps the
cluster's GPUs."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from app.accounting import standing as accounting
from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import service as clusters
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate
from app.database.core import Database
from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import host_namespace_name
from app.kube.manifests import labels as lbl
from app.nodes import service as nodes
from app.nodes.schemas import AssignmentIn
from tests import factories
from tests.quotas.test_approval_reaches_host_real import (  # noqa: F401 - fixtures
    Worker,
    gpu_quota,
    host,
    remove_tenant_objects,
    worker,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kube_server

H100 = "NVIDIA-H100-80GB-HBM3"
WITHIN_SECONDS = 30.0


@dataclass
class World:
    slug: str
    tenant_id: int
    tenant_admin: Principal
    platform_admin: Principal
    gpu_class_id: int
    node: str


@pytest.fixture
def world(own_pg_database: Database, host: KubernetesAdapter) -> Iterator[World]:  # noqa: F811
    """A tenant of its own with 16 approved H100s; two nodes of 8 on the environment's host."""
    slug = f"ka-{secrets.token_hex(3)}"
    with own_pg_database.transaction() as db:
        tenant = factories.tenant(db, slug)
        admin, operator = factories.user(db), factories.user(db, admin=True)
        factories.membership(db, tenant, admin, "admin")
        h100 = factories.gpu_class(db, H100, display_name="H100 80GB")
        factories.quota(db, tenant, h100, 16)
        env = factories.env_host(db)
        node = factories.node(db, env, h100, name=f"{slug}-n1", gpu_count=8)
        factories.node(db, env, h100, name=f"{slug}-n2", gpu_count=8)
        found = World(slug, tenant.id, Principal(user=admin, via="token",
                                                 roles={tenant.id: "admin"}),
                      Principal(user=operator, via="token", roles={}), h100.id, node.name)
    yield found
    remove_tenant_objects(host, slug)


def _model_guarantee(database: Database, world: World) -> int:
    with database.session() as db:
        return accounting.standing(db, world.tenant_id, world.gpu_class_id, "").shared_guarantee


def _gpu_hard(host: KubernetesAdapter, world: World, cluster: str) -> Any:  # noqa: F811
    quota = host.get("v1", "ResourceQuota", "tenant-quota",
                     host_namespace_name(world.slug, cluster))
    return None if quota is None else quota["spec"]["hard"].get(f"requests.{lbl.GPU_RESOURCE}")


def test_the_tenant_queue_carries_the_shared_pools_guarantee_through_a_dedication(
        own_pg_database: Database, world: World, worker: Worker,  # noqa: F811
        host: KubernetesAdapter) -> None:  # noqa: F811
    database = own_pg_database
    with database.transaction() as db:
        cluster_id = clusters.create_cluster(db, world.tenant_admin, worker.settings, world.slug,
                                             ClusterCreate(name="train", gpus=8,
                                                           gpu_class_id=world.gpu_class_id,
                                                           cpu_millicores=2000,
                                                           memory_mib=4096)).id

    def ready() -> bool | None:
        with database.session() as db:
            cluster = db.get(VirtualCluster, cluster_id)
            assert cluster is not None
            return True if cond.is_true(cluster.conditions or [], cond.READY) else None

    wait_for(ready, "the cluster to be Ready")
    assert gpu_quota(host, world.slug) == _model_guarantee(database, world) == 16
    with database.transaction() as db:
        nodes.assign_node(db, world.platform_admin, world.node, AssignmentIn(tenant=world.slug))
    wait_for(lambda: gpu_quota(host, world.slug) == 8, "the tenant queue's GPU quota of 8",
             timeout=WITHIN_SECONDS)
    assert _model_guarantee(database, world) == 8
    assert _gpu_hard(host, world, "train") == "8"
    with database.transaction() as db:
        nodes.end_assignment(db, world.platform_admin, world.node)
    wait_for(lambda: gpu_quota(host, world.slug) == 16, "the tenant queue's GPU quota of 16",
             timeout=WITHIN_SECONDS)
    assert _model_guarantee(database, world) == 16
