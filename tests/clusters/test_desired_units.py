"""What the database's grant units (issue 61) become on the host: a cluster of MIG slices or of
a share of one GPU gets its namespace quota and leaf queue in its unit, read from its row."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.clusters import desired
from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.quotas.models import BurstPolicy
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
