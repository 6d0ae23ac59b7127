"""One fleet, every surface that shows its capacity, the same figures: the API (fleet and GPU
classes and the approval queue), the pages (Fleet, Fleet by host and region, GPU classes, the
queue) with their charts, and ``portalctl fleet``, on the portal served over real HTTP."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import select, update

from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.nodes.models import Node
from app.quotas.models import GpusInUse, TenantQuota
from app.tenants.models import Tenant
from tests import factories
from tests.portalctl.conftest import Portal, PortalCtl
from tests.support.capacity import (
    FIGURES,
    Figures,
    chart_of,
    charted,
    of_api,
    queue_rows_of,
    rows_of,
)

GB200 = "NVIDIA-GB200"


def _fleet(portal: Portal) -> None:
    """eu: the env host's 64 H100s (one node not ready, one dedicated to acme, one not ready
    dedicated to globex) and gpu-eu-2's 16 GB200s (a node dedicated to acme, which holds a
    dedicated-nodes cluster); us: gpu-us-1's 16 H100s (8 not ready) and 4 GB200s. Quotas in both
    regions, shared-pool clusters on two hosts, GPUs in use and burst on both, four requests."""
    now = datetime.now(UTC)
    with portal.database.transaction() as db:
        tenants = {t.slug: t for t in db.scalars(select(Tenant))}
        acme, globex = tenants["acme"], tenants["globex"]
        h100 = db.get_one(GpuClass, portal.h100_id)
        eu1 = db.scalars(select(HostCluster).where(HostCluster.is_default.is_(True))).one()
        eu1.region = "eu"
        db.execute(update(TenantQuota).values(region="eu"))
        nodes = list(db.scalars(select(Node).where(Node.host_cluster_id == eu1.id)
                                .order_by(Node.id)))
        nodes[0].ready = nodes[2].ready = False
        factories.assignment(db, nodes[1], acme)
        factories.assignment(db, nodes[2], globex)
        gb200 = factories.gpu_class(db, GB200, display_name="GB200")
        eu2 = factories.registered_host(db, "gpu-eu-2", region="eu")
        gb200_nodes = [factories.node(db, eu2, gb200, gpu_count=4) for _ in range(4)]
        factories.assignment(db, gb200_nodes[0], acme)
        us = factories.registered_host(db, "gpu-us-1", region="us")
        factories.node(db, us, h100, gpu_count=8)
        factories.node(db, us, h100, gpu_count=8, ready=False)
        factories.node(db, us, gb200, gpu_count=4)
        for tenant, gpu, gpus, region in ((globex, h100, 8, "eu"), (acme, gb200, 4, "eu"),
                                          (globex, h100, 6, "us"), (acme, gb200, 2, "us")):
            factories.quota(db, tenant, gpu, gpus, region=region)
        factories.cluster(db, acme, eu1, "train", gpu_class_id=h100.id, gpus=6)
        factories.cluster(db, globex, us, "serve", gpu_class_id=h100.id, gpus=4)
        factories.cluster(db, acme, eu2, "big", placement="dedicated-nodes",
                          gpu_class_id=gb200.id, gpus=4)
        for tenant, host, gpus, burst in ((acme, eu1, 10, 4), (globex, us, 9, 5)):
            db.add(GpusInUse(tenant_id=tenant.id, gpu_class_id=h100.id,
                             host_cluster_id=host.id, gpus=gpus, burst_gpus=burst,
                             observed_at=now))
        for tenant, gpu, region in ((globex, h100, "us"), (acme, gb200, "eu"),
                                    (acme, h100, "eu"), (acme, gb200, "us")):
            factories.quota_request(db, tenant, gpu, gpus=1, region=region)


def _get(portal: Portal, path: str, html: bool = False) -> Any:
    accept = {"accept": "text/html"} if html else {}
    found = httpx.get(f"{portal.url}{path}", headers={
        "Authorization": f"Bearer {portal.tokens['platform-admin']}", **accept})
    assert found.status_code == 200, found.text
    return found.text if html else found.json()


def _by_key(rows: list[dict[str, Any]], *keys: str) -> dict[tuple[str, ...], Figures]:
    return {tuple(row[key] for key in keys): of_api(row) for row in rows}


def _portalctl_table(portalctl: PortalCtl, by: str, keys: int) -> dict[tuple[str, ...], Figures]:
    """``portalctl fleet --by <by>`` as a person reads it: a header, then a line per row."""
    result = portalctl("fleet", "--by", by)
    assert result.exit_code == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    columns = [column.lower() for column in header.split()]
    found = {}
    for line in lines:
        cells = dict(zip(columns, line.split(), strict=True))
        key_columns = columns[:keys]
        found[tuple(cells[c] for c in key_columns)] = {f: float(cells[f]) for f in FIGURES}
    return found


def test_every_surface_shows_the_same_figures(portal: Portal, portalctl: PortalCtl) -> None:
    _fleet(portal)
    api = _get(portal, "/api/v1/fleet/capacity")
    hosts = _by_key(api["hosts"], "host_cluster", "gpu_class")
    regions = _by_key(api["regions"], "region", "gpu_class")
    classes = _by_key(api["classes"], "gpu_class")
    h100 = portal.h100_product

    # what the fleet holds, worked out by hand from the docstring above
    assert classes[h100,] == {
        "total": 80, "ready": 56, "not_ready": 24, "dedicated": 16, "guaranteed": 30,
        "shared_guaranteed": 14, "free": 34, "in_use": 19, "borrowed": 9,
        "lent_from_idle_guarantees": 1}
    assert regions["eu", GB200]["guaranteed"] == 4 and regions["eu", GB200]["total"] == 16
    assert hosts["gpu-us-1", h100]["lent_from_idle_guarantees"] == 1  # 5 borrowed, 4 free

    # the API: per class, the GPU classes' capacity and the sums of the regions
    gpu_classes = {(c["product"],): of_api(c["capacity"])
                   for c in _get(portal, "/api/v1/gpu-classes")["items"]}
    assert gpu_classes == classes
    for figure in FIGURES:
        for product in (h100, GB200):
            assert classes[product,][figure] == sum(
                row[figure] for (_, gpu), row in regions.items() if gpu == product)
    for key, row in regions.items():  # nodes, in use and lent: the sums of the region's hosts
        on_hosts = [h for (host, gpu), h in hosts.items()
                    if gpu == key[1] and _region_of(api, host) == key[0]]
        for figure in ("total", "ready", "not_ready", "dedicated", "in_use", "borrowed",
                       "lent_from_idle_guarantees"):
            assert row[figure] == sum(h[figure] for h in on_hosts), (key, figure)
    for row in [*hosts.values(), *regions.values(), *classes.values()]:
        assert row["total"] == row["ready"] + row["not_ready"]
        assert row["guaranteed"] == row["dedicated"] + row["shared_guaranteed"]

    # the approval queue: each request's class capacity is its region's
    queue = {(i["gpu_class"], i["region"]): of_api(i["capacity"])
             for i in _get(portal, "/api/v1/quota-requests")["items"]}
    assert queue == {key: regions[key[1], key[0]] for key in queue} and len(queue) == 4

    # the pages
    fleet_page = _get(portal, "/admin/fleet", html=True)
    assert rows_of(fleet_page, "fleet-capacity", ("gpu-class",)) == classes
    by_name = {row["display_name"]: (row["gpu_class"],) for row in api["classes"]}
    assert {by_name[name]: bar for name, bar in chart_of(fleet_page, "capacity-chart").items()
            } == {key: charted(row) for key, row in classes.items()}
    assert rows_of(_get(portal, "/admin/gpu-classes", html=True), "gpu-classes",
                   ("gpu-class",)) == classes
    assert queue_rows_of(_get(portal, "/admin/quota-requests", html=True)) == {
        key: {f: v for f, v in row.items() if f in _QUEUE_LINE} for key, row in queue.items()}
    hosts_page = _get(portal, "/admin/fleet/hosts", html=True)
    assert rows_of(hosts_page, "host-capacity", ("host", "gpu-class")) == hosts
    assert rows_of(hosts_page, "region-capacity", ("region", "gpu-class")) == regions
    assert rows_of(hosts_page, "class-capacity", ("gpu-class",)) == classes
    names = {row["gpu_class"]: row["display_name"] for row in api["classes"]}
    assert chart_of(hosts_page, "host-capacity-chart") == {
        f"{host} · {names[gpu]}": charted(row) for (host, gpu), row in hosts.items()}
    assert chart_of(hosts_page, "region-capacity-chart") == {
        f"{region} · {names[gpu]}": charted(row) for (region, gpu), row in regions.items()}
    for bars in (chart_of(hosts_page, "region-capacity-chart"),
                 chart_of(fleet_page, "capacity-chart")):
        for bar in bars.values():
            assert min(bar["dedicated"], bar["shared-guaranteed"], bar["pool-not-ready"]) >= 0

    # portalctl fleet, as JSON and as the table a person reads
    portalctl.login(portal, "platform-admin")
    for by, rows, keys in (("host", hosts, ("host_cluster", "gpu_class")),
                           ("region", regions, ("region", "gpu_class")),
                           ("class", classes, ("gpu_class",))):
        result = portalctl("fleet", "--by", by, "-o", "json")
        assert result.exit_code == 0, result.stderr
        assert _by_key(json.loads(result.stdout), *keys) == rows
    assert _portalctl_table(portalctl, "class", 1) == classes
    assert {(region, gpu): row for (region, gpu, _), row
            in _portalctl_table(portalctl, "region", 3).items()} == regions
    assert {(host, gpu): row for (host, _, _, gpu), row
            in _portalctl_table(portalctl, "host", 4).items()} == hosts


_QUEUE_LINE = ("total", "ready", "not_ready", "dedicated", "guaranteed", "shared_guaranteed",
               "free", "in_use")


def _region_of(api: dict[str, Any], host: str) -> str:
    return str(next(h["region"] for h in api["hosts"] if h["host_cluster"] == host))
