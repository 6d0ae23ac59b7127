"""A KAI queue of slices or a share, kept by a reconciler: applied once, then left alone on
every resync, even where the server writes its numbers in another form (0.07 as 0.070, 6 as
6.0); a changed number is still drift. What the quota condition says a cluster holds."""

from __future__ import annotations

import copy
from decimal import Decimal

from app.kube.manifests import ClusterSpec, ManifestPolicy, TenantSpec, cluster_queue, tenant_queue
from app.kube.manifests.specs import GpuGrant
from app.kube.memory import InMemoryKube
from app.kube.port import Manifest
from app.reconcilers.applying import apply_drifted
from app.reconcilers.clusters.host_objects import quota_gpu_words

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def share(amount: int = 7, **fields: object) -> ClusterSpec:
    return ClusterSpec(tenant="acme", name="inference", kubernetes_version="1.32.4",
                       placement="shared-pool", gpu_class=H100, gpus=0, cpu_millicores=1000,
                       memory_mib=1024, endpoint="https://inference.acme.vc.example.com",
                       gpu_unit="share", amount=amount, **fields)  # type: ignore[arg-type]


def queues() -> list[Manifest]:
    tenant = TenantSpec("acme", "Acme", {}, 1000, 1000, gpu_grants=(
        GpuGrant(A100, "mig", "3g.40gb", 2), GpuGrant(H100, "share", "", 7)))
    return [tenant_queue(tenant, ManifestPolicy()), cluster_queue(share(), ManifestPolicy())]


def test_a_resync_of_fractional_queues_writes_nothing() -> None:
    kube = InMemoryKube()
    assert apply_drifted(kube, queues(), lambda: None) == 2
    assert apply_drifted(kube, queues(), lambda: None) == 0
    # The server's own form of the same numbers.
    for wanted in queues():
        live = copy.deepcopy(wanted)
        gpu = live["spec"]["resources"]["gpu"]
        gpu["quota"] = format(Decimal(str(gpu["quota"])), ".3f")  # "6.070", "0.070"
        gpu["limit"] = float(gpu["limit"])
        kube.apply(live, force=True)
    assert apply_drifted(kube, queues(), lambda: None) == 0


def test_a_changed_queue_number_is_still_drift() -> None:
    kube = InMemoryKube()
    apply_drifted(kube, queues(), lambda: None)
    live = copy.deepcopy(queues()[1])
    live["spec"]["resources"]["gpu"]["limit"] = 0.08
    kube.apply(live, force=True)
    assert apply_drifted(kube, queues(), lambda: None) == 1
    stored = kube.get(live["apiVersion"], "Queue", live["metadata"]["name"])
    assert stored is not None and stored["spec"]["resources"]["gpu"]["limit"] == 0.07


def test_the_quota_condition_says_what_the_cluster_holds() -> None:
    assert quota_gpu_words(share(50)) == "a share of 0.5 of one GPU"
    slices = ClusterSpec(tenant="acme", name="notebooks", kubernetes_version="1.32.4",
                         placement="shared-pool", gpu_class=A100, gpus=0, cpu_millicores=1000,
                         memory_mib=1024, endpoint="https://notebooks.acme.vc.example.com",
                         gpu_unit="mig", mig_profile="1g.10gb", amount=3)
    assert quota_gpu_words(slices) == "3 slices of 1g.10gb"
    whole = ClusterSpec(tenant="acme", name="train", kubernetes_version="1.32.4",
                        placement="shared-pool", gpu_class=H100, gpus=4, cpu_millicores=1000,
                        memory_mib=1024, endpoint="https://train.acme.vc.example.com")
    assert quota_gpu_words(whole) == "4 GPUs"
