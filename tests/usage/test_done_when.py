"""The issue's done-when: a simulated day of approvals, cluster creates, resizes and deletions
and a dedicated node, through the API and the web forms, with the worker sampling every hour.
The tenant's chart, the JSON and the CSV agree with the ledger to the minute, and the admin
page shows which tenant left its GPUs idle."""

from __future__ import annotations

import csv
import io
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.core import Database
from app.hosts.models import HostCluster
from app.kube.memory import InMemoryKube
from app.nodes.models import Node
from app.reconcilers.usage import UsageSampler
from app.usage.models import LedgerEntry
from tests.clusters.support import cluster_settings
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.support.tenancy import Tenancy, build_tenancy, headers, signed_in_admin_of
from tests.support.web import HTML, csrf_of
from tests.usage.support import T0, LedgerClock, fix_clock
from tests.usage.test_sampler import queue, quota

DAY = {"from": "2026-11-02", "to": "2026-11-03"}
MINUTE_IN_HOURS = 1 / 60


@dataclass
class Held:
    """What the test itself knows was held: (tenant, cluster) -> GPUs, changed at times."""

    changes: list[tuple[datetime, str, str, int]]

    def gpu_hours(self, tenant: str, until: datetime) -> float:
        total = 0.0
        keyed = sorted((c for c in self.changes if c[1] == tenant), key=lambda c: c[2])
        for _cluster, steps in itertools.groupby(keyed, key=lambda c: c[2]):
            ordered = sorted(steps)
            for (at, *_rest, gpus), following in zip(ordered, [*ordered[1:], None],
                                                     strict=True):
                end = following[0] if following else until
                total += gpus * (end - at).total_seconds() / 3600
        return total

    def at(self, tenant: str, when: datetime) -> list[int]:
        """The GPUs of each of the tenant's clusters at ``when``."""
        current = {name: gpus for at, slug, name, gpus in sorted(self.changes)
                   if slug == tenant and at <= when}
        return [gpus for gpus in current.values() if gpus]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def _ledger_gpu_hours(db: Session, tenant_id: int, kind: str, until: datetime) -> float:
    """Integrated straight from the ledger's entries, in Python, as a check of the SQL."""
    entries = db.scalars(select(LedgerEntry).where(LedgerEntry.tenant_id == tenant_id,
                                                   LedgerEntry.kind == kind)
                         .order_by(LedgerEntry.subject_id, LedgerEntry.at_s, LedgerEntry.id))
    total = 0.0
    for _subject, series in itertools.groupby(entries, key=lambda e: e.subject_id):
        steps = list(series)
        for entry, following in zip(steps, [*steps[1:], None], strict=True):
            end = following.at if following else until
            total += entry.gpus * (end - entry.at).total_seconds() / 3600
    return total


class Day:
    """The simulated day: every step at its time, through the surface a user would use."""

    def __init__(self, client: TestClient, db: Session, t: Tenancy, clock: LedgerClock,
                 database: Database, oidc_issuer: str) -> None:
        self.client, self.db, self.t, self.clock = client, db, t, clock
        self.admin = headers(db, t.platform_admin)
        self.acme = headers(db, t.acme_admin)
        self.globex = headers(db, t.globex_admin)
        self.held = Held([])
        self.host = InMemoryKube()
        # Sampled each hour (the schedule runs on the ledger's clock): a sample stands until
        # the next, an hour later.
        self.sampler = UsageSampler(cluster_settings(worker_resync_seconds=1800), database,
                                    InMemoryConnector(self.host))
        signed_in_admin_of(client, db, oidc_issuer, t.acme)
        self.csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)

    def at(self, hours: float) -> None:
        self.clock.at(hours=hours)

    def quota(self, slug: str, who: dict[str, str], gpus: int) -> None:
        asked = self.client.post(f"/api/v1/tenants/{slug}/quota-requests", headers=who, json={
            "gpu_class_id": self.t.h100.id, "gpus": gpus, "reason": "the day's work"})
        approved = self.client.post(f"/api/v1/quota-requests/{asked.json()['id']}/approve",
                                    headers=self.admin, json={})
        assert approved.status_code == 200, approved.text

    def create_by_form(self, name: str, gpus: int) -> None:
        made = self.client.post("/t/acme/clusters", headers={"X-CSRF-Token": self.csrf},
                                follow_redirects=False, data={
                                    "name": name, "gpu_class_id": str(self.t.h100.id),
                                    "gpus": str(gpus)})
        assert made.status_code in (201, 303), made.text
        self._held("acme", name, gpus)

    def resize_by_form(self, name: str, gpus: int) -> None:
        resized = self.client.post(f"/t/acme/clusters/{name}/resize",
                                   headers={"X-CSRF-Token": self.csrf}, follow_redirects=False,
                                   data={"gpus": str(gpus), "cpu_millicores": "0",
                                         "memory_mib": "0"})
        assert resized.status_code in (200, 303), resized.text
        self._held("acme", name, gpus)

    def create(self, slug: str, who: dict[str, str], name: str, gpus: int) -> None:
        made = self.client.post(f"/api/v1/tenants/{slug}/clusters", headers=who, json={
            "name": name, "gpu_class_id": self.t.h100.id, "gpus": gpus})
        assert made.status_code in (201, 202), made.text
        self._held(slug, name, gpus)

    def resize(self, slug: str, who: dict[str, str], name: str, gpus: int) -> None:
        resized = self.client.patch(f"/api/v1/tenants/{slug}/clusters/{name}", headers=who,
                                    json={"gpus": gpus})
        assert resized.status_code in (200, 202), resized.text
        self._held(slug, name, gpus)

    def delete(self, slug: str, who: dict[str, str], name: str) -> None:
        gone = self.client.delete(f"/api/v1/tenants/{slug}/clusters/{name}", headers=who)
        assert gone.status_code == 202, gone.text
        self._held(slug, name, 0)

    def node(self, slug: str | None) -> None:
        node = self.db.scalars(select(Node).order_by(Node.id)).first()
        assert node is not None
        host = self.db.get(HostCluster, node.host_cluster_id)
        assert host is not None
        path = f"/api/v1/nodes/{node.name}/assignment?host_cluster={host.name}"
        answer = (self.client.put(path, headers=self.admin, json={"tenant": slug}) if slug
                  else self.client.delete(path, headers=self.admin))
        assert answer.status_code in (200, 204), answer.text

    def _held(self, slug: str, name: str, gpus: int) -> None:
        self.held.changes.append((self.clock.now, slug, name, gpus))
        current = {(s, n): g for _at, s, n, g in sorted(self.held.changes)}
        self.host = self._reported(current)
        connector = self.sampler.kube
        assert isinstance(connector, InMemoryConnector)
        connector.host_port = self.host

    @staticmethod
    def _reported(current: dict[tuple[str, str], int]) -> InMemoryKube:
        """acme's pods ask for all their GPUs and KAI binds half of them (the others wait);
        globex's cluster sits idle."""
        host = InMemoryKube()
        for (slug, name), gpus in current.items():
            if gpus:
                asked = gpus if slug == "acme" else 0
                host.seed(quota(slug, name, str(asked), str(gpus)))
                host.seed(queue(slug, name, str(asked // 2), str(asked)))
        return host

    def sample(self) -> None:
        run_due(self.sampler, "worker-1")


def _simulate(day: Day) -> None:
    steps: list[tuple[float, Callable[[], None]]] = [
             (0.0, lambda: day.quota("acme", day.acme, 8)),
             (0.0, lambda: day.quota("globex", day.globex, 12)),
             (1.0, lambda: day.create_by_form("train", 4)),
             (3.5, lambda: day.resize_by_form("train", 6)),
             (5.0, lambda: day.create("acme", day.acme, "eval", 2)),
             (9.25, lambda: day.node("globex")),
             (12.0, lambda: day.delete("acme", day.acme, "eval")),
             (14.0, lambda: day.create("globex", day.globex, "big", 4)),
             (18.75, lambda: day.resize("acme", day.acme, "train", 2)),
             (22.0, lambda: day.node(None))]
    samples: list[tuple[float, Callable[[], None]]] = [(h + 0.5, day.sample) for h in range(24)]
    for hours, step in sorted(steps + samples, key=lambda s: s[0]):
        day.at(hours)
        step()
    day.at(24)


def test_a_simulated_day_agrees_everywhere(client: TestClient, db: Session, database: Database,
                                           clock: LedgerClock, oidc_issuer: str) -> None:
    t = build_tenancy(db)
    day = Day(client, db, t, clock, database, oidc_issuer)
    _simulate(day)
    end = T0 + timedelta(days=1)
    expected = {slug: day.held.gpu_hours(slug, end) for slug in ("acme", "globex")}
    assert expected == {"acme": 4 * 2.5 + 6 * 15.25 + 2 * 5.25 + 2 * 7, "globex": 4 * 10}
    ledger = {slug: _ledger_gpu_hours(db, tenant.id, "cluster", end)
              for slug, tenant in (("acme", t.acme), ("globex", t.globex))}
    assert ledger == pytest.approx(expected, abs=MINUTE_IN_HOURS)

    rows = client.get("/api/v1/usage", params=DAY, headers=day.admin).json()["rows"]
    by_tenant = {r["tenant"]: r for r in rows}
    assert {s: r["allocated_gpu_hours"] for s, r in by_tenant.items()} == pytest.approx(
        expected, abs=MINUTE_IN_HOURS)
    assert by_tenant["globex"]["dedicated_gpu_hours"] == pytest.approx(
        _ledger_gpu_hours(db, t.globex.id, "node", end)) == pytest.approx(8 * 12.75)
    assert by_tenant["acme"]["approved_gpu_hours"] == 8 * 24

    exported = list(csv.DictReader(io.StringIO(
        client.get("/api/v1/usage.csv", params=DAY, headers=day.acme).text)))
    [acme_row] = exported
    assert float(acme_row["allocated_gpu_hours"]) == by_tenant["acme"]["allocated_gpu_hours"]
    # In use is what KAI bound, not what the pods asked for: each hour's sample (at h:30)
    # stands until the next, the last one until the day ends.
    bound = sum(gpus // 2 * min(1.0, 24 - (hour + 0.5)) for hour in range(24)
                for gpus in day.held.at("acme", T0 + timedelta(hours=hour + 0.5)))
    assert by_tenant["acme"]["used_gpu_hours"] == pytest.approx(bound, abs=MINUTE_IN_HOURS)
    assert float(acme_row["used_gpu_hours"]) == by_tenant["acme"]["used_gpu_hours"]
    assert by_tenant["globex"]["used_gpu_hours"] == 0

    page = client.get("/t/acme/usage", params=DAY, headers=day.acme).text
    bars = re.findall(r'<rect class="bar"[^>]*data-category="2026-11-02" data-value="([\d.]+)"',
                      page.split('id="daily-chart"')[1].split("</figure>")[0])
    assert [float(v) for v in bars] == [by_tenant["acme"]["allocated_gpu_hours"]]
    assert 'href="/api/v1/usage.csv?from=2026-11-02' in page

    admin_page = client.get("/admin/usage", params=DAY, headers=day.admin).text
    idle_rows = re.findall(r'<tr data-tenant="([\w-]+)" data-gpu-class="[^"]*">.*?'
                           r'<td class="idle-hours">([\d.]+)</td>\s*<td>(\d+)%</td>',
                           admin_page, flags=re.S)
    assert idle_rows[0][0] == "globex"
    assert float(idle_rows[0][1]) == pytest.approx(40 + 8 * 12.75)
    assert idle_rows[0][2] == "100"
    acme_idle = expected["acme"] - bound  # the half of its GPUs KAI never bound
    assert ("acme", f"{acme_idle:.2f}", f"{round(100 * acme_idle / expected['acme'])}"
            ) in idle_rows
