"""A fleet with each unit of issue 61: 16 whole H100s shared in steps of 0.25, and an A100 in
MIG mode (the demo fleet's slices), for the quota, cluster and portalctl tests."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from tests import factories
from tests.support.tenancy import Tenancy, build_tenancy

A100_SLICES = {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4,
               "nvidia.com/mig-7g.80gb": 2}
SLICES_MESSAGE = ("A100 SXM4 80GB has no whole GPUs in the fleet, only MIG slices: ask for "
                  "slices of 1g.10gb (14 in the fleet), 3g.40gb (4) or 7g.80gb (2)")


@dataclass
class UnitsFleet:
    t: Tenancy
    host: HostCluster
    h100: GpuClass
    a100: GpuClass


def units_fleet(db: Session, *, share_step: int | None = 25) -> UnitsFleet:
    t = build_tenancy(db, nodes=2)
    t.h100.share_step = share_step
    host = factories.env_host(db)
    a100 = factories.gpu_class(db, "NVIDIA-A100-SXM4-80GB", display_name="A100 SXM4 80GB")
    factories.node(db, host, a100, "a100-mig-n1", gpu_count=0, mig_strategy="mixed",
                   mig_resources=A100_SLICES)
    db.flush()
    return UnitsFleet(t, host, t.h100, a100)
