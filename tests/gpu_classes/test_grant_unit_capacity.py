"""Issue 61: capacity per MIG profile and in shares of one GPU. Slices are figures of their own;
shares come out of the whole-GPU pool, rounded up; whole-GPU figures do not move for slices."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.database.core import utcnow
from app.gpu_classes import repository
from app.gpu_classes.capacity import free_steps
from app.gpu_classes.models import GpuClass
from app.gpu_classes.repository import SliceSums
from app.gpu_classes.service import capacity
from app.hosts.models import HostCluster
from app.kit.gpu_units import SHARE, WHOLE_GPUS, GrantUnit
from app.quotas.models import GpusInUse, TenantQuota
from app.tenants.models import Tenant
from tests import factories
from tests.support import oidc
from tests.support.capacity import chart_of
from tests.support.tenancy import headers
from tests.support.web import HTML, csrf_of, htmx

A100_SLICES = {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4,
               "nvidia.com/mig-1g.10gb+me": 2}
WHOLE_FIGURES = ("total", "ready", "not_ready", "dedicated", "guaranteed", "shared_guaranteed",
                 "free", "in_use", "borrowed", "lent_from_idle_guarantees")


def _quota(db: Session, tenant: Tenant, gpu: GpuClass, unit: str, amount: int,
           profile: str = "") -> None:
    db.add(TenantQuota(tenant_id=tenant.id, gpu_class_id=gpu.id, gpus=0, unit=unit,
                       mig_profile=profile, amount=amount))
    db.flush()


def _in_use(db: Session, tenant: Tenant, gpu: GpuClass, host: HostCluster, unit: str,
            gpus: float, profile: str = "") -> None:
    db.add(GpusInUse(tenant_id=tenant.id, gpu_class_id=gpu.id, host_cluster_id=host.id,
                     unit=unit, mig_profile=profile, gpus=gpus, observed_at=utcnow()))
    db.flush()


def _a100_fleet(db: Session) -> tuple[Tenant, HostCluster, GpuClass]:
    acme, host = factories.tenant(db, "acme"), factories.host_cluster(db, "gpu-1")
    a100 = factories.gpu_class(db, "NVIDIA-A100-SXM4-80GB", display_name="A100 SXM4 80GB")
    for name, ready, gone in (("a100-mig-1", True, None), ("a100-mig-2", False, None),
                              ("a100-mig-gone", True, utcnow())):
        factories.node(db, host, a100, name, gpu_count=0, mig_strategy="mixed",
                       mig_resources=A100_SLICES, ready=ready, gone_at=gone)
    return acme, host, a100


def test_slices_are_counted_per_profile_kai_can_count(db: Session) -> None:
    acme, host, a100 = _a100_fleet(db)
    whole_before = capacity(db, a100.id).model_dump(include=set(WHOLE_FIGURES))
    _quota(db, acme, a100, "mig", 3, "1g.10gb")
    _in_use(db, acme, a100, host, "mig", 2.0, "1g.10gb")
    factories.cluster(db, acme, host, "notebooks", gpu_class_id=a100.id, gpus=0, unit="mig",
                      mig_profile="1g.10gb", amount=3)
    found = capacity(db, a100.id)
    assert found.model_dump(include=set(WHOLE_FIGURES)) == whole_before
    assert (found.total, found.free, found.in_use) == (0, 0, 0.0)
    assert [p.model_dump() for p in found.mig_profiles] == [
        {"profile": "1g.10gb", "total": 28, "ready": 14, "guaranteed": 3, "free": 11,
         "in_use": 2.0, "kai_gpus_each": 1},
        {"profile": "3g.40gb", "total": 8, "ready": 4, "guaranteed": 0, "free": 4,
         "in_use": 0.0, "kai_gpus_each": 3}]
    # The profile KAI cannot count is still listed as the nodes have it, but never offered.
    assert found.mig_resources == {name: 2 * count for name, count in A100_SLICES.items()}
    assert found.shared is None
    assert [free_steps(found, GrantUnit("mig", p)) for p in ("1g.10gb", "3g.40gb", "2g.20gb")] == [
        11, 4, 0]
    assert free_steps(found, SHARE) == 0  # no whole GPUs to share
    assert repository.mig_sums(db, [a100.id])[a100.id]["nvidia.com/mig-3g.40gb"] == SliceSums(
        total=8, not_ready=4)


def _h100_fleet(db: Session) -> tuple[Tenant, Tenant, HostCluster, GpuClass]:
    acme, globex = factories.tenant(db, "acme"), factories.tenant(db, "globex")
    host = factories.host_cluster(db, "gpu-1")
    h100 = factories.gpu_class(db, display_name="H100 80GB HBM3", share_step=25)
    factories.node(db, host, h100, gpu_count=8)
    factories.node(db, host, h100, gpu_count=8)
    factories.quota(db, acme, h100, 4)
    return acme, globex, host, h100


def test_shares_take_whole_gpus_out_of_free_rounded_up(db: Session) -> None:
    acme, globex, _, h100 = _h100_fleet(db)
    before = capacity(db, h100.id)
    assert (before.guaranteed, before.free, before.shared_fraction_gpus) == (4, 12, 0)
    _quota(db, acme, h100, "share", 25)
    _quota(db, globex, h100, "share", 50)
    found = capacity(db, h100.id)
    assert (found.shared_guaranteed, found.shared_fraction_gpus, found.guaranteed,
            found.free) == (4, 1, 5, 11)
    assert found.total == found.guaranteed + found.free + found.not_ready
    assert found.shared is not None
    assert found.shared.model_dump() == {"step": 25, "guaranteed": "0.75", "in_use": "0",
                                         "free_hundredths": 1125}
    assert (free_steps(found, SHARE), free_steps(found, WHOLE_GPUS)) == (1125, 11)
    _quota(db, factories.tenant(db, "initech"), h100, "share", 50)
    found = capacity(db, h100.id)
    assert (found.shared_fraction_gpus, found.free, found.shared.guaranteed if found.shared
            else None) == (2, 10, "1.25")


def test_shares_in_use_are_gpus_in_use_and_their_own_figure(db: Session) -> None:
    acme, _, host, h100 = _h100_fleet(db)
    _in_use(db, acme, h100, host, "gpu", 3.0)
    _in_use(db, acme, h100, host, "share", 0.5)
    found = capacity(db, h100.id)
    assert found.in_use == 3.5
    assert found.shared is not None and found.shared.in_use == "0.5"


def _fleet(client: TestClient, db: Session) -> dict[str, Any]:
    admin = headers(db, factories.user(db, admin=True))
    response = client.get("/api/v1/fleet/capacity", headers=admin)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_api_shows_profiles_and_shares_per_host_region_and_class(
        client: TestClient, db: Session) -> None:
    acme, _, host, h100 = _h100_fleet(db)
    _quota(db, acme, h100, "share", 50)
    factories.cluster(db, acme, host, "inference", gpu_class_id=h100.id, gpus=0, unit="share",
                      amount=50)
    _, _, a100 = _a100_fleet_on(db, host, acme)
    db.commit()
    fleet = _fleet(client, db)
    [h100_host] = [r for r in fleet["hosts"] if r["gpu_class"] == h100.product]
    assert (h100_host["shared_fraction_gpus"], h100_host["free"]) == (1, 15)
    assert h100_host["shared"] == {"step": 25, "guaranteed": "0.5", "in_use": "0",
                                   "free_hundredths": 1550}
    [h100_class] = [r for r in fleet["classes"] if r["gpu_class"] == h100.product]
    assert (h100_class["guaranteed"], h100_class["free"]) == (5, 11)
    [a100_class] = [r for r in fleet["classes"] if r["gpu_class"] == a100.product]
    assert [p["profile"] for p in a100_class["mig_profiles"]] == ["1g.10gb", "3g.40gb"]
    classes = client.get("/api/v1/gpu-classes",
                         headers=headers(db, factories.user(db, admin=True))).json()["items"]
    [listed] = [c for c in classes if c["id"] == a100.id]
    assert listed["capacity"]["mig_profiles"][1]["kai_gpus_each"] == 3
    assert [c["share_step"] for c in classes if c["id"] == h100.id] == [25]


def _a100_fleet_on(db: Session, host: HostCluster,
                   acme: Tenant) -> tuple[Tenant, HostCluster, GpuClass]:
    a100 = factories.gpu_class(db, "NVIDIA-A100-SXM4-80GB", display_name="A100 SXM4 80GB")
    factories.node(db, host, a100, "a100-mig-1", gpu_count=0, mig_strategy="mixed",
                   mig_resources=A100_SLICES)
    return acme, host, a100


def test_a_platform_admin_sets_and_clears_a_share_step_audited(
        client: TestClient, db: Session) -> None:
    h100 = factories.gpu_class(db, display_name="H100 80GB HBM3")
    admin = headers(db, factories.user(db, admin=True))
    db.commit()
    url = f"/api/v1/gpu-classes/{h100.id}"
    shared = client.patch(url, headers=admin, json={"share_step": 25})
    assert shared.status_code == 200, shared.text
    assert (shared.json()["share_step"], shared.json()["display_name"]) == (25, "H100 80GB HBM3")
    uneven = client.patch(url, headers=admin, json={"share_step": 30})
    assert uneven.status_code == 422 and "divide one GPU" in uneven.text
    assert client.patch(url, headers=admin, json={}).status_code == 422
    cleared = client.patch(url, headers=admin, json={"share_step": None})
    assert cleared.status_code == 200 and cleared.json()["share_step"] is None
    changes = db.scalars(select(AuditEvent).where(AuditEvent.action == "gpu_class.update")
                         .order_by(AuditEvent.id)).all()
    assert [(e.before, e.after) for e in changes] == [
        ({"share_step": None}, {"share_step": 25}), ({"share_step": 25}, {"share_step": None})]


def test_the_class_page_sets_a_share_step_and_the_fleet_page_shows_slices_and_shares(
        client: TestClient, db: Session) -> None:
    acme, _, host, h100 = _h100_fleet(db)
    _quota(db, acme, h100, "share", 75)
    _a100_fleet_on(db, host, acme)
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/admin/gpu-classes", headers=HTML)
    assert page.status_code == 200 and 'name="share_step"' in page.text
    csrf, url = csrf_of(page.text), f"/admin/gpu-classes/{h100.id}"
    uneven = client.post(url, headers=htmx(csrf), data={"display_name": "H100", "share_step": "30"})
    assert uneven.status_code == 422 and "divide one GPU" in uneven.text
    halves = client.post(url, headers=htmx(csrf), data={"display_name": "H100", "share_step": "50"})
    assert halves.status_code == 200 and 'name="share_step"' in halves.text
    assert 'value="50"' in halves.text
    off = client.post(url, headers=htmx(csrf), data={"display_name": "H100", "share_step": ""})
    assert off.status_code == 200
    db.expire_all()
    assert db.get_one(GpuClass, h100.id).share_step is None
    fleet = client.get("/admin/fleet", headers=HTML)
    assert fleet.status_code == 200
    assert 'data-profile="3g.40gb"' in fleet.text and "counts each as 3 GPUs" in fleet.text
    assert "nvidia.com/mig-1g.10gb+me: not offered, KAI cannot count it" in fleet.text
    shares = fleet.text[fleet.text.index('class="shares"'):]
    assert shares.startswith('class="shares"><span class="shares-guaranteed">0.75</span>')
    assert "not shared any more" in shares[:400]
    # The chart stacks the whole GPUs the shares take with the guarantees: its bar is the total.
    [bar] = [bar for name, bar in chart_of(fleet.text, "capacity-chart").items()
             if "H100" in name]
    assert bar == {"dedicated": 0, "shared-guaranteed": 5, "free": 11, "pool-not-ready": 0}
