"""GPUs KAI lends a leaf queue beyond its quota (burst) are counted apart from those within it
(guaranteed): in the samples, the folded hours, the report's JSON and CSV, and the pages."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.database.core import Database
from app.http.pagination import Page
from app.kube.memory import InMemoryKube
from app.quotas.schemas import TenantQuotaOut
from app.usage.csv_export import COLUMNS
from app.usage.models import HourlyUsage, UsageSample
from tests.support.drive import run_due
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML
from tests.usage.support import LedgerClock, approve_quota, create_cluster, fix_clock, report
from tests.usage.test_sampler import acme_with_a_dedicated_node, pod, queue, quota, sampler

DAY = {"from": "2026-11-02T00:00:00Z", "to": "2026-11-03T00:00:00Z"}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def leaf_queue(allocated: str, quota_gpus: int, cluster: str = "train") -> dict[str, Any]:
    """acme's leaf queue with KAI's allocation and the guarantee in its spec."""
    found = queue("acme", cluster, allocated, allocated)
    found["spec"]["resources"] = {"gpu": {"quota": quota_gpus, "limit": -1}}
    return found


def _acme_bursting(database: Database, clock: LedgerClock) -> Tenancy:
    """acme's 4-GPU cluster ``train``: KAI gives it 6 GPUs from 10:00 to 11:00 (2 beyond its
    quota of 4), then 3 from 11:00 to 12:00; a sample every half hour, each standing 30
    minutes at most. Nothing afterwards."""
    with database.transaction() as db:
        t = build_tenancy(db)
        approve_quota(db, t, 8)
        create_cluster(db, t, "train", 4)
    host = InMemoryKube()
    for minute, allocated in ((0, "6"), (30, "6"), (60, "3"), (90, "3")):
        host.seed(leaf_queue(allocated, 4))
        host.seed(quota("acme", "train", allocated, "4"))
        clock.at(hours=10, minutes=minute)
        run_due(sampler(database, host, resync=900), "w")
    clock.at(hours=12)
    return t


def _hours(database: Database, t: Tenancy) -> tuple[float, float, float]:
    with database.session() as db:
        rows = report(db, t.principal(t.platform_admin)).rows
    assert len(rows) == 1
    return rows[0].used_gpu_hours, rows[0].guaranteed_gpu_hours, rows[0].burst_gpu_hours


def test_a_queue_sample_keeps_its_burst_and_other_sources_none(
        database: Database, clock: LedgerClock) -> None:
    _acme_bursting(database, clock)
    with database.session() as db:
        taken = {(s.source, s.taken_s % 7200 // 60): (s.used_gpus, s.burst_gpus)
                 for s in db.scalars(select(UsageSample))}
    assert taken[("queue", 0)] == (6.0, 2.0) and taken[("queue", 60)] == (3.0, 0.0)
    assert {burst for (source, _), (_, burst) in taken.items() if source == "quota"} == {0.0}


def test_burst_gpu_hours_are_part_of_those_in_use_and_survive_folding(
        database: Database, clock: LedgerClock) -> None:
    t = _acme_bursting(database, clock)
    assert _hours(database, t) == (6.0 + 3.0, 4.0 + 3.0, 2.0)
    clock.at(days=2, hours=13)  # past the raw retention: both hours are folded
    run_due(sampler(database, InMemoryKube()), "w")
    with database.session() as db:
        folded = db.scalars(select(HourlyUsage).where(HourlyUsage.source == "queue")
                            .order_by(HourlyUsage.hour_s)).all()
        assert [(h.used_gpu_seconds, h.burst_gpu_seconds) for h in folded] == [
            (6 * 3600, 2 * 3600), (3 * 3600, 0)]
    assert _hours(database, t) == (9.0, 7.0, 2.0)


def test_dedicated_node_use_is_never_burst(database: Database, clock: LedgerClock) -> None:
    t, node = acme_with_a_dedicated_node(database)
    host = InMemoryKube()
    host.seed(pod("a", node, 8))
    host.seed(leaf_queue("5", 4))
    clock.at(hours=10)
    run_due(sampler(database, host, resync=1800), "w")
    clock.at(hours=11)
    assert _hours(database, t) == (8.0 + 5.0, 8.0 + 4.0, 1.0)


def test_json_csv_and_pages_give_guaranteed_and_burst(
        client: TestClient, database: Database, clock: LedgerClock) -> None:
    t = _acme_bursting(database, clock)
    with database.transaction() as db:
        viewer = headers(db, t.acme_viewer)
    row = client.get("/api/v1/usage", params=DAY, headers=viewer).json()["rows"][0]
    assert (row["used_gpu_hours"], row["guaranteed_gpu_hours"], row["burst_gpu_hours"]) == (
        9.0, 7.0, 2.0)
    download = client.get("/api/v1/usage.csv", params=DAY, headers=viewer).text
    assert COLUMNS[8] == "used_gpu_hours"  # readers index the columns: new ones come last
    assert COLUMNS[10:12] == ("guaranteed_gpu_hours", "burst_gpu_hours")
    cells = list(csv.reader(io.StringIO(download)))[1]
    assert (cells[8], cells[10], cells[11]) == ("9.000000", "7.000000", "2.000000")

    page = client.get("/t/acme/usage", params=DAY, headers={**HTML, **viewer}).text
    chart = page.split('id="in-use-chart"')[1].split("</figure>")[0]
    bars = re.findall(r'data-series="(\w+)" data-category="2026-11-02" data-value="([\d.]+)"',
                      chart)
    assert bars == [("guaranteed", "7.0"), ("burst", "2.0")]
    assert re.search(r'class="burst" data-value="2.0"', page)


def _bursting_now(database: Database) -> dict[str, str]:
    """acme's ``train`` (quota 4) holds 6 GPUs, 2 of them burst, and 8 run on its dedicated
    node; a viewer's headers."""
    t, node = acme_with_a_dedicated_node(database)
    host = InMemoryKube()
    for obj in (leaf_queue("6", 4), quota("acme", "train", "6", "4"), pod("a", node, 8)):
        host.seed(obj)
    run_due(sampler(database, host), "worker-1")
    with database.transaction() as db:
        return headers(db, t.acme_viewer)


def test_gpus_in_use_now_say_how_many_are_burst_per_tenant_and_class(
        client: TestClient, database: Database, clock: LedgerClock) -> None:
    viewer = _bursting_now(database)
    answer = client.get("/api/v1/tenants/acme/quota", headers=viewer)
    [row] = answer.json()["items"]
    assert (row["in_use_gpus"], row["burst_in_use_gpus"]) == (14.0, 2.0)
    # Encoded from plain values: the very bytes of its response model, floats as floats.
    assert answer.content == Page[TenantQuotaOut].model_validate(
        answer.json()).model_dump_json().encode()
    dashboard = client.get("/t/acme", headers={**HTML, **viewer}).text
    assert "of which burst (reclaimable)" in dashboard
    assert re.search(r'<td class="burst">\s*2\s*</td>', dashboard)
    usage = client.get("/t/acme/usage", headers={**HTML, **viewer}).text
    train = usage.split('data-cluster="train"')[1].split("</tr>")[0]
    assert re.findall(r'class="(in-use|burst)">([^<]*)<', train) == [
        ("in-use", "6.0"), ("burst", "2.0")]
    assert re.search(r'class="class-total".*?class="burst">2.0<', usage, flags=re.S)
    now = usage.split('id="now-chart"')[1].split("</figure>")[0]
    assert 'data-series="of which burst" data-category="' in now


def test_a_clusters_gpus_in_use_are_guaranteed_and_burst_and_burst_is_reclaimable(
        client: TestClient, database: Database, clock: LedgerClock) -> None:
    url = "/api/v1/tenants/acme/clusters/train"
    t, _node = acme_with_a_dedicated_node(database)
    with database.transaction() as db:
        viewer = headers(db, t.acme_viewer)
    assert client.get(url, headers=viewer).json()["gpus_in_use"] is None  # not read yet
    host = InMemoryKube()
    host.seed(leaf_queue("6", 4))
    run_due(sampler(database, host), "worker-1")
    shown = client.get(url, headers=viewer).json()["gpus_in_use"]
    assert {k: shown[k] for k in ("guaranteed", "burst", "reclaimable")} == {
        "guaranteed": 4.0, "burst": 2.0, "reclaimable": True}
    listed = client.get("/api/v1/tenants/acme/clusters", headers=viewer).json()["items"]
    assert listed[0]["gpus_in_use"] == shown
    page = client.get("/t/acme/clusters/train", headers={**HTML, **viewer}).text
    assert re.search(r'id="gpus-in-use" data-guaranteed="4.0" data-burst="2.0"', page)
    assert "2 burst (reclaimable)" in page

    host = InMemoryKube()
    host.seed(leaf_queue("3", 4))
    clock.at(minutes=5)
    run_due(sampler(database, host), "worker-1")
    shown = client.get(url, headers=viewer).json()["gpus_in_use"]
    assert (shown["guaranteed"], shown["burst"], shown["reclaimable"]) == (3.0, 0.0, False)
    clock.at(minutes=10)  # the queue is gone
    run_due(sampler(database, InMemoryKube()), "worker-1")
    assert client.get(url, headers=viewer).json()["gpus_in_use"] is None


def test_the_openapi_document_says_burst_may_be_reclaimed(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert "reclaimed by KAI" in schemas["GpusInUseOut"]["properties"]["burst"]["description"]
    for field in ("guaranteed_gpu_hours", "burst_gpu_hours"):
        assert schemas["UsageRow"]["properties"][field]["description"]
    assert schemas["TenantQuotaOut"]["properties"]["burst_in_use_gpus"]["description"]


def test_per_cluster_rows_split_each_clusters_hours_and_leave_dedicated_nodes_out(
        client: TestClient, database: Database, clock: LedgerClock) -> None:
    """acme's ``train`` (quota 4, given 6 then 3) and ``eval`` (quota 2, given 2): one row
    each, the CSV the same; the dedicated node's pods belong to no cluster's row."""
    t, node = acme_with_a_dedicated_node(database)
    with database.transaction() as db:
        create_cluster(db, t, "eval", 2)
        viewer = headers(db, t.acme_viewer)
    host = InMemoryKube()
    host.seed(pod("a", node, 8))
    for minute, allocated in ((0, "6"), (30, "6"), (60, "3"), (90, "3")):
        host.seed(leaf_queue(allocated, 4))
        host.seed(leaf_queue("2", 2, cluster="eval"))
        clock.at(hours=10, minutes=minute)
        run_due(sampler(database, host, resync=900), "w")
    clock.at(hours=12)
    body = client.get("/api/v1/usage/clusters", params=DAY, headers=viewer).json()
    rows = {r["cluster"]: (r["used_gpu_hours"], r["guaranteed_gpu_hours"], r["burst_gpu_hours"])
            for r in body["rows"]}
    assert rows == {"train": (9.0, 7.0, 2.0), "eval": (4.0, 4.0, 0.0)}
    download = client.get("/api/v1/usage/clusters.csv", params=DAY, headers=viewer)
    lines = list(csv.DictReader(io.StringIO(download.text)))
    assert {r["cluster"]: (float(r["used_gpu_hours"]), float(r["burst_gpu_hours"]))
            for r in lines} == {"train": (9.0, 2.0), "eval": (4.0, 0.0)}
    assert client.get("/api/v1/usage/clusters", params={**DAY, "tenant": "globex"},
                      headers=viewer).status_code == 404
