"""What the database's grant units (issue 61) become on the host: a cluster of MIG slices or of
a share of one GPU gets its namespace quota and leaf queue in its unit, read from its row, and
its tenant's queue the tenant's slices and shares in KAI's count."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.clusters import desired
from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.kube import manifests
from app.kube.manifests import TenantSpec
from app.quotas.models import BurstPolicy, TenantQuota
from app.tenants.models import Tenant
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.tenancy import Tenancy

A100 = "NVIDIA-A100-SXM4-80GB"
SETTINGS = cluster_settings()


def a100(db: Session) -> GpuClass:
    return factories.gpu_class(db, A100, display_name="A100 SXM4 80GB")


def part_cluster(db: Session, tenant: Tenant, gpu_class: GpuClass, name: str, unit: str,
                 amount: int, profile: str = "", **fields: object) -> VirtualCluster:
    return factories.cluster(db, tenant, factories.env_host(db), name, gpu_class_id=gpu_class.id,
                             gpus=0, unit=unit, mig_profile=profile, amount=amount,
                             cpu_millicores=1000, memory_mib=1024, **fields)


def bursting(db: Session, tenant: Tenant, burst_gpus: int) -> None:
    db.add(BurstPolicy(tenant_id=tenant.id, tier="burst", burst_gpus=burst_gpus))
    db.flush()


def of_kind(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    return next(o for o in objects
                if o["kind"] == kind and name in (None, o["metadata"]["name"]))


def gpu_figures(queue: dict[str, Any]) -> tuple[object, object]:
    gpu = queue["spec"]["resources"]["gpu"]
    return gpu["quota"], gpu["limit"]


def test_a_cluster_of_slices_is_quota_d_by_its_profile_and_queued_by_its_g_count(
        db: Session, tenancy: Tenancy) -> None:
    bursting(db, tenancy.acme, 4)  # slices never burst, whatever the tenant's tier
    row = part_cluster(db, tenancy.acme, a100(db), "notebooks", "mig", 2, "3g.40gb")
    wanted = desired.load(db, row, SETTINGS)
    spec = wanted.spec
    assert (spec.gpu_unit, spec.mig_profile, spec.amount, spec.gpu_limit) == (
        "mig", "3g.40gb", 2, None)
    objects = wanted.own_objects()
    hard = of_kind(objects, "ResourceQuota")["spec"]["hard"]
    assert hard["requests.nvidia.com/mig-3g.40gb"] == "2"
    assert hard["requests.nvidia.com/gpu"] == "0"
    assert gpu_figures(of_kind(objects, "Queue")) == (6, 6)


def test_a_cluster_of_a_share_is_queued_by_its_fraction(db: Session, tenancy: Tenancy) -> None:
    row = part_cluster(db, tenancy.acme, tenancy.h100, "inference", "share", 50)
    objects = desired.load(db, row, SETTINGS).own_objects()
    assert gpu_figures(of_kind(objects, "Queue")) == (0.5, 0.5)
    assert of_kind(objects, "ResourceQuota")["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"


def test_a_cluster_of_whole_gpus_still_holds_its_gpus(db: Session, tenancy: Tenancy) -> None:
    row = factories.cluster(db, tenancy.acme, factories.env_host(db), "train",
                            gpu_class_id=tenancy.h100.id, gpus=4, cpu_millicores=1000,
                            memory_mib=1024)
    spec = desired.load(db, row, SETTINGS).spec
    assert (spec.gpu_unit, spec.mig_profile, spec.amount, spec.gpus) == ("gpu", "", 4, 4)


def part_quota(db: Session, tenant: Tenant, gpu_class: GpuClass, unit: str, amount: int,
               profile: str = "") -> None:
    db.add(TenantQuota(tenant_id=tenant.id, gpu_class_id=gpu_class.id, gpus=0, unit=unit,
                       mig_profile=profile, amount=amount, cpu_millicores=2000, memory_mib=2048))
    db.flush()


def tenant_queue(db: Session, tenant: Tenant) -> dict[str, Any]:
    wanted = desired.load_tenant_queue(db, tenant.id, factories.env_host(db).id, SETTINGS)
    assert wanted is not None and wanted.queue is not None
    return wanted.queue


def test_a_tenants_queue_adds_its_slices_and_shares_in_kais_units_below_its_burst(
        db: Session, tenancy: Tenancy) -> None:
    """16 whole H100s, 3 x 1g.10gb of A100 (g-count 3) and 0.5 of an H100: 19.5 in KAI's
    count, the burst of 4 on top; a whole-GPU cluster borrows only whole GPUs."""
    bursting(db, tenancy.acme, 4)
    part_quota(db, tenancy.acme, a100(db), "mig", 3, "1g.10gb")
    part_quota(db, tenancy.acme, tenancy.h100, "share", 50)
    whole = factories.cluster(db, tenancy.acme, factories.env_host(db), "train",
                              gpu_class_id=tenancy.h100.id, gpus=4, cpu_millicores=1000,
                              memory_mib=1024)
    queue = tenant_queue(db, tenancy.acme)
    assert gpu_figures(queue) == (19.5, 23.5)
    assert queue["spec"]["resources"]["cpu"]["quota"] == 4000  # the part rows' CPU counts too
    assert desired.load(db, whole, SETTINGS).spec.gpu_limit == 20


def test_sleeping_slices_give_their_g_count_back_and_slices_held_past_quota_stay_guaranteed(
        db: Session, tenancy: Tenancy) -> None:
    a100_class = a100(db)
    part_quota(db, tenancy.acme, a100_class, "mig", 3, "3g.40gb")
    part_cluster(db, tenancy.acme, a100_class, "notebooks", "mig", 1, "3g.40gb",
                 power="asleep")
    assert gpu_figures(tenant_queue(db, tenancy.acme))[0] == 16 + 9 - 3
    # An expiry shrank the quota below what the clusters hold: they keep what they run.
    part_cluster(db, tenancy.acme, a100_class, "lab", "mig", 3, "3g.40gb")
    db.execute(update(TenantQuota).where(TenantQuota.unit == "mig").values(amount=1))
    assert gpu_figures(tenant_queue(db, tenancy.acme))[0] == 16 + 12 - 3


def test_a_whole_gpu_tenants_queue_is_what_it_was_before_units(
        db: Session, tenancy: Tenancy) -> None:
    host = factories.env_host(db)
    factories.cluster(db, tenancy.acme, host, "train", gpu_class_id=tenancy.h100.id, gpus=4)
    factories.cluster(db, tenancy.acme, host, "idle", gpu_class_id=tenancy.h100.id, gpus=6,
                      power="asleep")
    facts = desired.read_tenant(db, tenancy.acme, host.region, host.id)
    assert (facts.guarantees, facts.asleep_gpus, facts.grants) == (
        {tenancy.h100.product: 16}, 6, ())
    before_units = TenantSpec("acme", "Acme", {tenancy.h100.product: 16}, 0, 0, asleep_gpus=6)
    assert tenant_queue(db, tenancy.acme) == manifests.tenant_queue(
        before_units, desired.manifest_policy(SETTINGS))
