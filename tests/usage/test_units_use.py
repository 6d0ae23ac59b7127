"""GPUs in use in each unit: what a pod asks for (whole GPUs, a share by KAI's gpu-fraction,
MIG slices), what a KAI queue's status and a namespace quota say of fractions and slices, and
the samples and GPUs in use the sampler writes in the cluster's unit (slices, never KAI's
g-count)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import select

from app.database.core import Database
from app.kube.manifests import labels as lbl
from app.kube.manifests.names import cluster_queue_name, host_namespace_name
from app.kube.memory import InMemoryKube
from app.kube.usage import GpuAsk, gpus_by_node, namespace_use, pod_gpu_ask, queue_use
from app.quotas.models import GpusInUse, TenantQuota
from app.quotas.repository import quota_rows_query
from app.usage.models import UsageSample
from tests import factories
from tests.support.drive import run_due
from tests.support.tenancy import build_tenancy
from tests.usage.support import LedgerClock, fix_clock
from tests.usage.test_sampler import sampler

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> LedgerClock:
    return fix_clock(monkeypatch)


def unit_queue(tenant: str, cluster: str, allocated: dict[str, str],
               requested: dict[str, str] | None = None, quota: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentQueue": tenant}
    if quota is not None:
        spec["resources"] = {"gpu": {"quota": quota, "limit": quota}}
    return {"apiVersion": lbl.KAI_API_VERSION, "kind": "Queue",
            "metadata": {"name": cluster_queue_name(tenant, cluster),
                         "labels": lbl.cluster_labels(tenant, cluster)},
            "spec": spec,
            "status": {"allocated": {"cpu": "2", **allocated},
                       "requested": requested if requested is not None else allocated}}


def unit_quota(tenant: str, cluster: str, used: dict[str, str],
               hard: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "tenant-quota", "namespace": host_namespace_name(tenant, cluster),
                         "labels": lbl.cluster_labels(tenant, cluster)},
            "spec": {"hard": hard}, "status": {"hard": hard, "used": used}}


def a_pod(*, annotations: dict[str, str] | None = None, limits: dict[str, str] | None = None,
          node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x",
                                            "resources": {"limits": limits or {}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "annotations": annotations or {}},
            "spec": spec, "status": {"phase": "Running"}}


@pytest.mark.parametrize(("allocated", "gpus"), [("250m", 0.25), ("0.5", 0.5), ("3", 3.0),
                                                 ("1500m", 1.5)])
def test_a_queues_gpus_are_read_in_any_quantity_form(allocated: str, gpus: float) -> None:
    found = queue_use(unit_queue("acme", "notes", {lbl.GPU_RESOURCE: allocated}))
    assert found is not None
    assert found.in_unit("share") == (gpus, gpus, 0.0)
    assert found.allocated_slices == {}


def test_a_queues_mig_slices_are_counted_per_profile_in_slices_not_kais_g_count() -> None:
    """KAI's queue status keys slices by their own resource, one per slice (3 x 3g.40gb is 3
    here, though KAI weighs them as 9 GPUs in its fair share and the queue's quota)."""
    queue = unit_queue("acme", "notes", {MIG_1G: "3", MIG_3G: "3",
                                         "nvidia.com/mig-1g.10gb+me": "1"},
                       requested={MIG_1G: "4", MIG_3G: "3"}, quota=9)
    found = queue_use(queue)
    assert found is not None
    assert found.allocated_gpus == 0.0
    assert found.allocated_slices == {"1g.10gb": 3.0, "3g.40gb": 3.0}  # "+me": KAI counts none
    assert found.in_unit("mig", "1g.10gb") == (3.0, 4.0, 0.0)
    assert found.in_unit("mig", "3g.40gb") == (3.0, 3.0, 0.0)  # slices never burst
    assert found.in_unit("mig", "7g.80gb") == (0.0, 0.0, 0.0)


def test_a_namespace_quota_counts_slices_per_profile() -> None:
    requests = f"requests.{MIG_1G}"
    found = namespace_use(unit_quota("acme", "notes", {requests: "3"},
                                     {requests: "3", f"requests.{lbl.GPU_RESOURCE}": "0"}))
    assert found is not None
    assert found.in_unit("mig", "1g.10gb") == (3.0, 3.0)
    assert found.in_unit("gpu") == (0.0, 0.0)
    assert found.full  # a fourth slice pod would be refused by the quota
    half = namespace_use(unit_quota("acme", "notes", {requests: "2"}, {requests: "3"}))
    assert half is not None and not half.full


@pytest.mark.parametrize(("pod", "ask"), [
    (a_pod(limits={lbl.GPU_RESOURCE: "2"}), GpuAsk("gpu", "", Decimal(2))),
    (a_pod(annotations={"gpu-fraction": "0.25"}), GpuAsk("share", "", Decimal("0.25"))),
    (a_pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}),
     GpuAsk("share", "", Decimal(1))),
    # KAI ignores a fraction outside (0, 1]: the pod then asks for no GPU
    (a_pod(annotations={"gpu-fraction": "1.5"}), GpuAsk("gpu", "", Decimal(0))),
    (a_pod(annotations={"gpu-fraction": "half"}), GpuAsk("gpu", "", Decimal(0))),
    (a_pod(limits={MIG_1G: "2"}), GpuAsk("mig", "1g.10gb", Decimal(2))),
    (a_pod(limits={MIG_1G: "1", MIG_3G: "2"}), GpuAsk("mig", "3g.40gb", Decimal(2))),
    (a_pod(), GpuAsk("gpu", "", Decimal(0))),
])
def test_a_pods_ask_is_whole_gpus_a_share_or_slices(pod: dict[str, Any], ask: GpuAsk) -> None:
    assert pod_gpu_ask(pod) == ask


def test_a_nodes_gpus_count_shares_as_fractions_and_no_slices() -> None:
    pods = [a_pod(annotations={"gpu-fraction": "0.25"}, node="h100-a"),
            a_pod(annotations={"gpu-fraction": "0.25"}, node="h100-a"),
            a_pod(limits={lbl.GPU_RESOURCE: "1"}, node="h100-a"),
            a_pod(limits={MIG_1G: "3"}, node="a100-mig")]
    assert gpus_by_node(pods) == {"a100-mig": 0.0, "h100-a": 1.5}


def test_the_sampler_writes_each_clusters_use_in_its_unit(database: Database,
                                                          clock: LedgerClock) -> None:
    """Whole GPUs as before; a share's fractions in GPUs (0.5); MIG in slices of the cluster's
    profile (3, where KAI's queue quota says 9 for 3 x 3g.40gb); and GPUs in use one row per
    tenant, class, unit and profile."""
    with database.transaction() as db:
        t = build_tenancy(db)
        a100 = factories.gpu_class(db, "NVIDIA-A100-SXM4-80GB", display_name="A100 80GB")
        host = factories.env_host(db)
        factories.cluster(db, t.acme, host, "train", gpu_class_id=t.h100.id, gpus=2)
        factories.cluster(db, t.acme, host, "infer", gpu_class_id=t.h100.id, unit="share",
                          amount=50, gpus=0)
        factories.cluster(db, t.acme, host, "notes", gpu_class_id=a100.id, unit="mig",
                          mig_profile="3g.40gb", amount=3, gpus=0)
        for class_id, unit, amount, profile in ((t.h100.id, "gpu", 8, ""),
                                                (t.h100.id, "share", 50, ""),
                                                (a100.id, "mig", 3, "3g.40gb")):
            db.add(TenantQuota(tenant_id=t.acme.id, gpu_class_id=class_id, unit=unit,
                               mig_profile=profile, amount=amount,
                               gpus=amount if unit == "gpu" else 0))
        ids = {"h100": t.h100.id, "a100": a100.id, "acme": t.acme.id}
    kube = InMemoryKube()
    for obj in (unit_queue("acme", "train", {lbl.GPU_RESOURCE: "3"}, quota=2),
                unit_queue("acme", "infer", {lbl.GPU_RESOURCE: "500m"},
                           requested={lbl.GPU_RESOURCE: "750m"}, quota="0.5"),
                unit_queue("acme", "notes", {MIG_3G: "3"}, requested={MIG_3G: "4"}, quota=9),
                unit_quota("acme", "notes", {f"requests.{MIG_3G}": "3"},
                           {f"requests.{MIG_3G}": "3"})):
        kube.seed(obj)
    run_due(sampler(database, kube), "w")
    with database.session() as db:
        taken = {(s.source, s.unit, s.mig_profile): (s.used_gpus, s.requested_gpus, s.burst_gpus)
                 for s in db.scalars(select(UsageSample))}
        in_use = {(r.gpu_class_id, r.unit, r.mig_profile): (r.gpus, r.burst_gpus)
                  for r in db.scalars(select(GpusInUse))}
        quota_rows = db.execute(select(quota_rows_query(ids["acme"]).subquery())).mappings()
        units = {row.id: row.unit for row in db.execute(select(TenantQuota.id, TenantQuota.unit))}
        quota_in_use = {units[row["id"]]: (row["in_use"], row["burst"]) for row in quota_rows}
    assert taken == {("queue", "gpu", ""): (3.0, 3.0, 1.0),
                     ("queue", "share", ""): (0.5, 0.75, 0.0),
                     ("queue", "mig", "3g.40gb"): (3.0, 4.0, 0.0),
                     ("quota", "mig", "3g.40gb"): (3.0, 3.0, 0.0)}
    assert in_use == {(ids["h100"], "gpu", ""): (3.0, 1.0),
                      (ids["h100"], "share", ""): (0.5, 0.0),
                      (ids["a100"], "mig", "3g.40gb"): (3.0, 0.0)}
    # each quota row's in use is of its own unit: no slice counted as a GPU, nor a share twice
    assert quota_in_use == {"gpu": (3.0, 1.0), "share": (0.5, 0.0), "mig": (3.0, 0.0)}
