"""Clusters of MIG slices and of a GPU share on a real kube-apiserver with KAI's Queue CRD: the
host accepts their namespace, quota and queues (0.5 and 0.07 GPUs in a ``type: number``), stores
them as built, and a second apply writes nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.manifests import ClusterSpec, TenantSpec, cluster_host_objects, platform_objects
from app.kube.manifests.labels import KAI_API_VERSION
from app.kube.manifests.specs import GpuGrant
from app.kube.port import Manifest
from tests.kube.test_real_server import (
    POLICY,
    assert_reapply_changes_nothing,
    dependency_errors,
    remove,
    tenant_slug,
)

pytestmark = pytest.mark.kube_server
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def objects(slug: str, unit: str, profile: str, amount: int) -> list[Manifest]:
    tenant = TenantSpec(slug, "Fabrikam", {H100: 1}, 16000, 64000, gpu_grants=(
        GpuGrant(A100, "mig", "3g.40gb", 2), GpuGrant(H100, "share", "", 7)))
    cluster = ClusterSpec(
        tenant=slug, name="notebooks", kubernetes_version="1.32.4", placement="shared-pool",
        gpu_class=A100 if unit == "mig" else H100, gpus=0, cpu_millicores=4000,
        memory_mib=8192, endpoint=f"https://notebooks.{slug}.vc.example.com",
        gpu_unit=unit, mig_profile=profile, amount=amount)  # type: ignore[arg-type]
    return [*platform_objects(POLICY), *cluster_host_objects(cluster, tenant, POLICY)]


@pytest.mark.parametrize(("unit", "profile", "amount", "leaf"), [
    ("mig", "3g.40gb", 2, Decimal(6)), ("share", "", 7, Decimal("0.07"))])
def test_the_host_keeps_queues_of_slices_and_shares_as_built(
        host_admin: KubernetesAdapter, unit: str, profile: str, amount: int,
        leaf: Decimal) -> None:
    slug = tenant_slug()
    built = objects(slug, unit, profile, amount)
    assert dependency_errors(built) == []
    try:
        assert_reapply_changes_nothing(host_admin, built)
        stored = host_admin.get(KAI_API_VERSION, "Queue", slug)
        assert stored is not None
        # 1 whole + 2 x 3g.40gb (6) + 0.07
        assert Decimal(str(stored["spec"]["resources"]["gpu"]["quota"])) == Decimal("7.07")
        queue = host_admin.get(KAI_API_VERSION, "Queue", f"{slug}--notebooks")
        assert queue is not None
        gpu = queue["spec"]["resources"]["gpu"]
        assert Decimal(str(gpu["quota"])) == Decimal(str(gpu["limit"])) == leaf
    finally:
        remove(host_admin, built)
