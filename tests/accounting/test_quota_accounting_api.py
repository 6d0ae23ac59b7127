"""Issue 54's walk, through the API and the pages: a tenant with 16 H100s approved and a node of
8 dedicated to it may hold 8 in shared-pool clusters and 8 in dedicated-nodes clusters on its
node, whichever comes first; every surface says so alike. And a dedication racing a create."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.clusters import service as clusters
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate
from app.database.core import Database, utcnow
from app.kit.errors import ProblemError
from app.nodes import service as nodes
from app.nodes.models import Node, NodeAssignment
from app.nodes.schemas import AssignmentIn
from app.process import quota_check
from app.quotas import service as quotas
from app.quotas.schemas import ApproveIn
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.capacity import rows_of
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML

CLUSTERS = "/api/v1/tenants/acme/clusters"
REFUSED_16 = ("8 of your 16 H100 80GB GPUs are on your dedicated nodes; 8 are left for "
              "shared-pool clusters, 16 asked: request more quota first")


def _acme_with_16(db: Session) -> tuple[Tenancy, Node]:
    tenancy = build_tenancy(db)
    factories.quota(db, tenancy.acme, tenancy.h100, 16)
    node = db.scalars(select(Node).order_by(Node.id)).first()
    assert node is not None
    db.commit()
    return tenancy, node


def _create(client: TestClient, db: Session, tenancy: Tenancy, name: str, gpus: int,
            placement: str = "shared-pool") -> Any:
    return client.post(CLUSTERS, headers=headers(db, tenancy.acme_admin), json={
        "name": name, "gpu_class_id": tenancy.h100.id, "gpus": gpus, "placement": placement})


def _dedicate(client: TestClient, db: Session, tenancy: Tenancy, node: Node) -> Any:
    return client.put(f"/api/v1/nodes/{node.name}/assignment",
                      headers=headers(db, tenancy.platform_admin), json={"tenant": "acme"})


def _quota(client: TestClient, db: Session, tenancy: Tenancy) -> dict[str, Any]:
    [row] = client.get("/api/v1/tenants/acme/quota",
                       headers=headers(db, tenancy.acme_admin)).json()["items"]
    return dict(row)


def test_a_shared_pool_cluster_of_the_whole_quota_is_refused_once_a_node_is_dedicated(
        client: TestClient, db: Session) -> None:
    tenancy, node = _acme_with_16(db)
    assert _dedicate(client, db, tenancy, node).status_code == 200
    quota = _quota(client, db, tenancy)
    assert {k: quota[k] for k in ("approved_gpus", "dedicated_gpus", "shared_pool_left_gpus",
                                  "dedicated_left_gpus", "shared_pool_gpus")} == {
        "approved_gpus": 16, "dedicated_gpus": 8, "shared_pool_left_gpus": 8,
        "dedicated_left_gpus": 8, "shared_pool_gpus": 8}
    refused = _create(client, db, tenancy, "big", 16)
    assert refused.status_code == 422
    assert refused.json()["errors"] == [{"field": "gpus", "message": REFUSED_16}]
    assert _create(client, db, tenancy, "shared", 8).status_code == 201
    assert _create(client, db, tenancy, "ded", 8, "dedicated-nodes").status_code == 201
    quota = _quota(client, db, tenancy)
    assert (quota["shared_pool_left_gpus"], quota["dedicated_left_gpus"],
            quota["over_quota_gpus"]) == (0, 0, 0)


def test_a_dedication_past_what_shared_pool_clusters_leave_is_refused(
        client: TestClient, db: Session) -> None:
    tenancy, node = _acme_with_16(db)
    assert _create(client, db, tenancy, "big", 16).status_code == 201
    refused = _dedicate(client, db, tenancy, node)
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"dedicating {node.name} (8 GPUs) would give acme 8 H100 80GB GPUs on dedicated nodes "
        "and 16 in shared-pool clusters, 24 in all: 8 more than its approved quota of 16; "
        "shrink its shared-pool clusters or approve more quota first")
    assert client.patch(f"{CLUSTERS}/big", json={"gpus": 8},
                        headers=headers(db, tenancy.acme_admin)).status_code == 200
    assert _dedicate(client, db, tenancy, node).status_code == 200


def test_ending_a_dedication_under_a_dedicated_nodes_cluster_is_refused(
        client: TestClient, db: Session) -> None:
    tenancy, node = _acme_with_16(db)
    assert _dedicate(client, db, tenancy, node).status_code == 200
    assert _create(client, db, tenancy, "ded", 8, "dedicated-nodes").status_code == 201
    admin = headers(db, tenancy.platform_admin)
    refused = client.delete(f"/api/v1/nodes/{node.name}/assignment", headers=admin)
    assert refused.status_code == 409
    assert "they would lose 8" in refused.json()["detail"]
    assert client.patch(f"{CLUSTERS}/ded", json={"gpus": 0},
                        headers=headers(db, tenancy.acme_admin)).status_code == 200
    assert client.delete(f"/api/v1/nodes/{node.name}/assignment", headers=admin).status_code == 204


def test_the_fleet_pages_per_region_and_per_host_agree(client: TestClient, db: Session) -> None:
    tenancy, node = _acme_with_16(db)
    assert _dedicate(client, db, tenancy, node).status_code == 200
    assert _create(client, db, tenancy, "shared", 8).status_code == 201
    page = client.get("/admin/fleet/hosts", headers={**headers(db, tenancy.platform_admin),
                                                     **HTML}).text
    product = tenancy.h100.product
    [region] = [f for (_, p), f in rows_of(page, "region-capacity",
                                           ("region", "gpu-class")).items() if p == product]
    [host] = [f for (_, p), f in rows_of(page, "host-capacity",
                                         ("host", "gpu-class")).items() if p == product]
    expected = {"dedicated": 8, "guaranteed": 16, "shared_guaranteed": 8, "free": 48}
    for shown in (region, host):
        assert {figure: shown[figure] for figure in expected} == expected
    api = client.get("/api/v1/fleet/capacity", headers=headers(db, tenancy.platform_admin))
    [region_api] = [r for r in api.json()["regions"] if r["gpu_class"] == product]
    assert {figure: region_api[figure] for figure in expected} == expected


def test_the_dashboard_shows_each_figure(client: TestClient, db: Session) -> None:
    tenancy, node = _acme_with_16(db)
    assert _dedicate(client, db, tenancy, node).status_code == 200
    assert _create(client, db, tenancy, "shared", 6).status_code == 201
    page = client.get("/t/acme", headers={**headers(db, tenancy.acme_admin), **HTML}).text
    table = page[page.index('id="quota"'):]
    for css, value in (("approved", 16), ("dedicated", 8), ("shared-pool-allocated", 6),
                       ("shared-pool-left", 2), ("dedicated-allocated", 0)):
        assert f'class="{css}">{value}' in table, css


def test_the_operators_check_lists_who_is_over_and_where(db: Session) -> None:
    """A tenant over quota from before the rule: rows as an old release left them."""
    tenancy, node = _acme_with_16(db)
    host = factories.env_host(db)
    factories.cluster(db, tenancy.acme, host, "old", gpus=16, gpu_class_id=tenancy.h100.id)
    factories.assignment(db, node, tenancy.acme)
    db.flush()
    lines = quota_check.report(db)
    assert lines[0].startswith("1 tenant quota(s) over")
    assert lines[1:] == [
        "acme H100 80GB in region (none): 8 over (8 dedicated + 16 in shared-pool clusters on "
        "16 approved)",
        f"  dedicated node {node.name} on host {host.name}: 8 GPUs",
        f"  shared-pool cluster old on host {host.name}: 16 GPUs"]
    assert db.scalar(select(func.sum(VirtualCluster.gpus))) == 16  # nothing taken away


def _race(database: Database, *doors: Callable[[Session], object]) -> list[str]:
    barrier = threading.Barrier(len(doors))

    def through(door: Callable[[Session], object]) -> str:
        barrier.wait(timeout=10)
        try:
            with database.transaction() as db:
                door(db)
        except ProblemError as error:
            return f"refused: {error}"
        return "passed"

    with ThreadPoolExecutor(max_workers=len(doors)) as pool:
        return list(pool.map(through, doors))


def test_a_dedication_racing_a_shared_pool_create_never_passes_the_quota(
        own_pg_database: Database) -> None:
    with own_pg_database.transaction() as db:
        tenancy, node = _acme_with_16(db)
        admin = tenancy.principal(tenancy.acme_admin)
        platform = Principal(user=tenancy.platform_admin, via="token", roles={})
        node_name, class_id = node.name, tenancy.h100.id
    create = ClusterCreate(name="c", gpus=16, gpu_class_id=class_id)
    for _ in range(5):
        outcomes = _race(
            own_pg_database,
            lambda db: clusters.create_cluster(db, admin, cluster_settings(), "acme", create),
            lambda db: nodes.assign_node(db, platform, node_name, AssignmentIn(tenant="acme")))
        assert sorted(o.split(":")[0] for o in outcomes) == ["passed", "refused"], outcomes
        with own_pg_database.transaction() as db:
            shared = db.scalar(select(func.coalesce(func.sum(VirtualCluster.gpus), 0)))
            dedicated = db.scalar(select(func.count()).select_from(NodeAssignment)
                                  .where(NodeAssignment.ended_at.is_(None)))
            assert (shared, dedicated) in {(16, 0), (0, 1)}, outcomes
            db.execute(delete(VirtualCluster))
            for assignment in db.scalars(select(NodeAssignment)):
                db.delete(assignment)


def test_an_expiry_below_what_is_held_takes_nothing_and_says_by_how_much(
        client: TestClient, db: Session) -> None:
    tenancy, node = _acme_with_16(db)
    temporary = factories.quota_request(db, tenancy.acme, tenancy.h100, gpus=8, state="pending")
    temporary.ends_at = utcnow() + timedelta(days=1)
    db.flush()
    quotas.approve(db, tenancy.principal(tenancy.platform_admin), temporary.id, ApproveIn())
    db.commit()
    assert _dedicate(client, db, tenancy, node).status_code == 200
    assert _create(client, db, tenancy, "shared", 16).status_code == 201
    [expired] = quotas.expire_quotas(db, utcnow() + timedelta(days=2))
    db.commit()
    assert (expired.gpus, expired.over_quota_gpus) == (8, 8)
    quota = _quota(client, db, tenancy)
    assert (quota["approved_gpus"], quota["shared_pool_allocated_gpus"],
            quota["over_quota_gpus"]) == (16, 16, 8)
    admin = headers(db, tenancy.acme_admin)
    assert client.patch(f"{CLUSTERS}/shared", json={"gpus": 12}, headers=admin).status_code == 200
    assert _quota(client, db, tenancy)["over_quota_gpus"] == 4
    assert _create(client, db, tenancy, "more", 1).status_code == 422
