"""Issue 61: a tenant holds whole GPUs, MIG slices and a share of one class in one region side
by side, each a standing of its own in its own steps; the whole-GPU figures stay what they
were, and a refusal of slices or a share speaks in them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounting import over_quota
from app.accounting import standing as accounting
from app.accounting.standing import Standing, shared_refusal
from app.auth.principal import Principal
from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.gpu_units import SHARE, GrantUnit
from app.quotas import service as quotas
from app.quotas.models import QuotaRequest, TenantQuota
from app.quotas.schemas import ApproveIn, QuotaRequestCreate
from app.tenants.models import Tenant
from tests import factories
from tests.clusters.support import cluster_settings

SLICE = GrantUnit("mig", "1g.10gb")
REGION = "eu"


def _parts_quota(db: Session, tenant: Tenant, gpu: GpuClass, unit: GrantUnit,
                 amount: int) -> TenantQuota:
    row = TenantQuota(tenant_id=tenant.id, gpu_class_id=gpu.id, region=REGION, gpus=0,
                      unit=unit.kind, mig_profile=unit.profile, amount=amount)
    db.add(row)
    db.flush()
    return row


def _parts_cluster(db: Session, tenant: Tenant, host: HostCluster, gpu: GpuClass, name: str,
                   unit: GrantUnit, amount: int) -> VirtualCluster:
    return factories.cluster(db, tenant, host, name, gpu_class_id=gpu.id, gpus=0,
                             unit=unit.kind, mig_profile=unit.profile, amount=amount)


def _acme_with_whole_gpus(db: Session) -> tuple[Tenant, HostCluster, GpuClass]:
    """acme: 16 H100s approved in eu, 8 of them on a dedicated node, 4 in a shared-pool
    cluster."""
    acme, host = factories.tenant(db, "acme"), factories.host_cluster(db, "gpu-eu-1", REGION)
    h100 = factories.gpu_class(db, display_name="H100 80GB HBM3")
    factories.node(db, host, h100, gpu_count=8)
    factories.assignment(db, factories.node(db, host, h100, gpu_count=8), acme)
    factories.quota(db, acme, h100, 16, region=REGION)
    factories.cluster(db, acme, host, "train", gpu_class_id=h100.id, gpus=4)
    return acme, host, h100


def test_whole_gpus_slices_and_a_share_of_one_class_are_three_standings(db: Session) -> None:
    acme, host, h100 = _acme_with_whole_gpus(db)
    whole_before = accounting.every_standing(db)
    _parts_quota(db, acme, h100, SLICE, 3)
    _parts_quota(db, acme, h100, SHARE, 50)
    _parts_cluster(db, acme, host, h100, "notebooks", SLICE, 2)
    _parts_cluster(db, acme, host, h100, "inference", SHARE, 25)

    assert accounting.standing(db, acme.id, h100.id, REGION) == Standing(
        approved=16, dedicated=8, shared_held=4)
    assert accounting.standing(db, acme.id, h100.id, REGION, unit=SLICE) == Standing(
        approved=3, shared_held=2)
    assert accounting.standing(db, acme.id, h100.id, REGION, unit=SHARE) == Standing(
        approved=50, shared_held=25)
    assert accounting.standings(db, acme.id, h100.id, unit=SHARE) == {
        REGION: Standing(approved=50, shared_held=25)}

    every = accounting.every_standing(db)
    whole_key = (acme.id, h100.id, REGION, "gpu", "")
    assert every[whole_key] == whole_before[whole_key]
    assert every[acme.id, h100.id, REGION, "mig", "1g.10gb"] == Standing(3, 0, 2)
    assert every[acme.id, h100.id, REGION, "share", ""] == Standing(50, 0, 25)
    assert accounting.unit_of((acme.id, h100.id, REGION, "mig", "1g.10gb")) == SLICE


def test_the_pool_guarantees_one_row_per_unit(db: Session) -> None:
    acme, host, h100 = _acme_with_whole_gpus(db)
    _parts_quota(db, acme, h100, SLICE, 3)
    _parts_quota(db, acme, h100, SHARE, 50)
    _parts_cluster(db, acme, host, h100, "notebooks", SLICE, 5)  # over its quota of 3
    rows = sorted(tuple(row) for row in db.execute(accounting.pool_guarantees([h100.id])))
    assert rows == [(REGION, h100.id, "gpu", "", 8), (REGION, h100.id, "mig", "1g.10gb", 5),
                    (REGION, h100.id, "share", "", 50)]


def test_a_cluster_of_slices_past_what_is_left_is_refused_in_slices(db: Session) -> None:
    acme, host, h100 = _acme_with_whole_gpus(db)
    _parts_quota(db, acme, h100, SLICE, 3)
    _parts_cluster(db, acme, host, h100, "notebooks", SLICE, 2)
    held = accounting.standing(db, acme.id, h100.id, REGION, unit=SLICE)
    assert shared_refusal(held, 1, "A100 SXM4 80GB", REGION, unit=SLICE) is None
    assert shared_refusal(held, 2, "A100 SXM4 80GB", REGION, unit=SLICE) == (
        "your shared-pool clusters hold 2 \u00d7 1g.10gb of your 3 \u00d7 1g.10gb of A100 SXM4 "
        "80GB in region eu; 1 \u00d7 1g.10gb left for shared-pool clusters, 2 \u00d7 1g.10gb "
        "asked: request more quota first")
    assert shared_refusal(Standing(approved=50), 75, "H100 80GB HBM3", "", unit=SHARE) == (
        "you have 0.5 of an H100 80GB HBM3 approved; 0.5 of a GPU left for shared-pool "
        "clusters, 0.75 of a GPU asked: request more quota first")


def test_whole_gpu_refusals_read_as_before(db: Session) -> None:
    acme, _, h100 = _acme_with_whole_gpus(db)
    held = accounting.standing(db, acme.id, h100.id, REGION)
    assert shared_refusal(held, 8, "H100 80GB HBM3", REGION) == (
        "8 of your 16 H100 80GB HBM3 GPUs in region eu are on your dedicated nodes; your "
        "shared-pool clusters hold 4; 4 are left for shared-pool clusters, 8 asked: request "
        "more quota first")


def test_the_operators_check_names_slices_over_their_quota(db: Session) -> None:
    acme, host, h100 = _acme_with_whole_gpus(db)
    _parts_quota(db, acme, h100, SLICE, 1)
    _parts_cluster(db, acme, host, h100, "notebooks", SLICE, 3)
    [found] = over_quota.over_quota(db)
    assert (found.tenant, found.unit, found.standing.over) == ("acme", SLICE, 2)
    assert [(h.name, h.gpus) for h in found.shared_clusters] == [("notebooks", 3)]
    assert found.dedicated_nodes == []


def test_a_whole_gpu_row_keeps_amount_and_gpus_together(db: Session) -> None:
    """Code that writes only ``gpus`` (every door before the units) keeps ``amount`` with it."""
    acme, _, h100 = _acme_with_whole_gpus(db)
    quota = db.scalars(select(TenantQuota).where(TenantQuota.unit == "gpu")).one()
    cluster = db.scalars(select(VirtualCluster).where(VirtualCluster.name == "train")).one()
    assert (quota.amount, cluster.amount) == (16, 4)
    quota.gpus, cluster.gpus = 20, 6
    db.flush()
    db.expire_all()
    assert (quota.unit, quota.amount, cluster.amount) == ("gpu", 20, 6)
    assert accounting.standing(db, acme.id, h100.id, REGION).approved == 20


def test_on_a_whole_gpu_row_the_figure_written_last_wins(db: Session) -> None:
    acme, host, h100 = _acme_with_whole_gpus(db)
    quota = TenantQuota(tenant_id=acme.id, gpu_class_id=h100.id, region="us", gpus=0)
    quota.amount = 6  # a door that counts in units
    cluster = factories.cluster(db, acme, host, "serve", gpu_class_id=h100.id, amount=2, gpus=3)
    db.add(quota)
    db.flush()
    db.expire_all()
    assert (quota.gpus, quota.amount, cluster.gpus, cluster.amount) == (6, 6, 3, 3)
    slices = _parts_cluster(db, acme, host, h100, "notebooks", SLICE, 2)
    slices.amount = 4
    db.flush()
    db.expire_all()
    assert (slices.gpus, slices.amount) == (0, 4)


def test_an_approved_whole_gpu_request_says_its_amount_too(db: Session) -> None:
    acme, _, h100 = _acme_with_whole_gpus(db)
    admin = factories.user(db, "admin@acme.example.com")
    factories.membership(db, acme, admin, "admin")
    platform = factories.user(db, "platform@example.com", admin=True)
    request = quotas.create_request(
        db, Principal(user=admin, via="token", roles={acme.id: "admin"}), cluster_settings(),
        "acme", QuotaRequestCreate(gpu_class_id=h100.id, gpus=6, region=REGION, reason="work"))
    quotas.approve(db, Principal(user=platform, via="token", roles={}), request.id,
                   ApproveIn(gpus=4, overcommit=True))
    row = db.get_one(QuotaRequest, request.id)
    assert (row.unit, row.amount, row.approved_gpus, row.approved_amount) == ("gpu", 6, 4, 4)


def test_the_quota_rows_figures_in_one_statement_follow_each_rows_unit(db: Session) -> None:
    """``standing_columns`` given a quota row's own unit and profile: each row's figures in its
    steps (the quota list's one statement)."""
    acme, host, h100 = _acme_with_whole_gpus(db)
    _parts_quota(db, acme, h100, SLICE, 3)
    _parts_quota(db, acme, h100, SHARE, 50)
    _parts_cluster(db, acme, host, h100, "notebooks", SLICE, 2)
    _parts_cluster(db, acme, host, h100, "inference", SHARE, 75)
    rows = db.execute(
        select(TenantQuota.unit, TenantQuota.amount,
               *accounting.standing_columns(TenantQuota.tenant_id, TenantQuota.gpu_class_id,
                                            TenantQuota.region, TenantQuota.amount,
                                            TenantQuota.unit, TenantQuota.mig_profile))
        .order_by(TenantQuota.id))
    assert [tuple(row) for row in rows] == [
        # unit, approved, dedicated, shared-pool, dedicated-nodes, private-nodes, guarantee
        ("gpu", 16, 8, 4, 0, 0, 8), ("mig", 3, 0, 2, 0, 0, 3), ("share", 50, 0, 75, 0, 0, 75)]
