"""The platform admin's home answers "what needs me now": quota requests waiting (how many, the
oldest), capacity per class as the fleet pages count it, hosts failing their checks, clusters
that failed or hang while waking; tenants see none of it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.gpu_classes import service as gpu_classes
from app.http.pagination import PageParams
from tests import factories
from tests.support.tenancy import Tenancy, build_tenancy, headers
from tests.support.web import HTML


def _now() -> datetime:
    """Read when a test runs, not when the module is collected (a full run takes minutes)."""
    return datetime.now(UTC).replace(microsecond=0)


def _condition(type_: str, status: bool, reason: str, message: str = "") -> cond.Condition:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": cond.timestamp(_now() - timedelta(hours=1)),
        "observedGeneration": 1,
    }


def _troubled_fleet(db: Session) -> Tenancy:
    t = build_tenancy(db)
    oldest = factories.quota_request(db, t.acme, t.h100, gpus=4)
    oldest.created_at = _now() - timedelta(days=2)
    factories.quota_request(db, t.globex, t.h100, gpus=2)
    factories.quota_request(db, t.globex, t.h100, gpus=1, state="approved")
    host = factories.env_host(db)
    sick = factories.host_cluster(db, "gpu-eu-2", region="eu")
    sick.health_reachable = False
    sick.health_checks = [{"name": "kai-queue-crd", "passed": False, "message": "no Queue CRD"}]
    factories.cluster(
        db,
        t.acme,
        host,
        "broken",
        conditions=[_condition(cond.FAILED, True, "InstallFailed", "helm: chart not found")],
    )
    factories.cluster(
        db,
        t.acme,
        host,
        "dozy",
        power="awake",
        power_changed_at=_now() - timedelta(minutes=30),
        conditions=[_condition(cond.ASLEEP, True, "ScaledDown")],
    )
    factories.cluster(
        db,
        t.acme,
        host,
        "waking-now",
        power="awake",
        power_changed_at=_now() - timedelta(minutes=1),
        conditions=[_condition(cond.ASLEEP, True, "ScaledDown")],
    )
    factories.cluster(
        db, t.globex, host, "fine", conditions=[_condition(cond.READY, True, "Ready")]
    )
    db.commit()
    return t


def _section(page: str, section_id: str) -> str:
    return page.split(f'id="{section_id}"')[1].split("</section>")[0]


def test_the_admin_home_says_what_needs_them_now(client: TestClient, db: Session) -> None:
    t = _troubled_fleet(db)
    page = client.get("/", headers={**HTML, **headers(db, t.platform_admin)}).text

    requests = _section(page, "attention-requests")
    assert 'data-count="2"' in requests
    assert re.search(r'Oldest: <strong>acme</strong> asks for 4 \u00d7 <span class="gpu-class" '
                     r'title="NVIDIA-H100-80GB-HBM3"><span class="gpu-class-name">H100 80GB<',
                     requests)
    assert 'href="/admin/quota-requests"' in requests

    hosts = _section(page, "attention-hosts")
    assert 'data-count="1"' in hosts and 'data-host="gpu-eu-2"' in hosts
    assert "unreachable; kai-queue-crd: no Queue CRD" in hosts
    assert 'data-host="default"' not in hosts

    clusters = _section(page, "attention-clusters")
    assert 'data-count="1"' in clusters and 'data-waking="1"' in clusters
    assert 'data-cluster="acme/broken"' in clusters and "helm: chart not found" in clusters
    assert 'data-cluster="acme/dozy"' in clusters and "waking for too long" in clusters
    assert "waking-now" not in clusters and "globex/fine" not in clusters


def test_the_home_counts_capacity_as_the_gpu_class_service_does(
    client: TestClient, db: Session
) -> None:
    t = _troubled_fleet(db)
    page = client.get("/", headers={**HTML, **headers(db, t.platform_admin)}).text
    row = _section(page, "attention-capacity").split(f'data-gpu-class="{t.h100.product}"')[1]
    row = row.split("</tr>")[0]
    shown = dict(re.findall(r'<td class="([\w-]+)">(?:<strong>)?(-?\d+)', row))
    capacity = (
        gpu_classes.list_classes(db, t.principal(t.platform_admin), PageParams(limit=10))
        .items[0]
        .capacity
    )
    assert capacity is not None
    assert shown == {
        "total": str(capacity.total),
        "not-ready": str(capacity.not_ready),
        "assigned": str(capacity.assigned),
        "shared": str(capacity.shared_guaranteed),
        "free": str(capacity.free),
    }
    assert shown["total"] == "64"


def test_a_quiet_fleet_says_so(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    db.commit()
    page = client.get("/", headers={**HTML, **headers(db, t.platform_admin)}).text
    assert 'data-count="0"' in _section(page, "attention-requests")
    assert "Nothing waits for a decision." in page
    assert "No cluster has failed or hangs while waking." in page
    assert 'href="/admin/idle-gpus"' in _section(page, "attention-idle-gpus")


def test_tenants_get_their_own_home(client: TestClient, db: Session) -> None:
    t = _troubled_fleet(db)
    page = client.get("/", headers={**HTML, **headers(db, t.acme_admin)}).text
    assert 'id="attention' not in page and "gpu-eu-2" not in page
    assert 'href="/t/acme"' in page
