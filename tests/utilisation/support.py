"""A fleet whose GPUs the fake Prometheus reports: acme's shared-pool cluster ``train`` (one GPU
busy, one idle), acme's dedicated node with no pod (idle), globex's pod in its cluster
``rival`` on the same pool node (idle), and a GPU no tenant holds."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.kube.manifests.names import host_namespace_name
from tests import factories
from tests.support.fake_prometheus import Answers, Labels
from tests.support.tenancy import Tenancy

UTIL, USED = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"
PEAK = "max_over_time(DCGM_FI_DEV_GPU_UTIL[30m]) and DCGM_FI_DEV_GPU_UTIL offset 30m"
TRAIN_NS = host_namespace_name("acme", "train")
RIVAL_NS = host_namespace_name("globex", "rival")


def gpu(uuid: str, node: str, **labels: str) -> dict[str, str]:
    return {"gpu": uuid[-1], "UUID": uuid, "device": f"nvidia{uuid[-1]}",
            "modelName": "NVIDIA H100 80GB HBM3", "Hostname": node, **labels}


BUSY = gpu("GPU-1", "pool-1", namespace=TRAIN_NS, pod="train-worker-0", container="main")
# Scraped without honor_labels: the pod's namespace kept as exported_namespace.
IDLE = gpu("GPU-2", "pool-1", namespace="gpu-operator", exported_namespace=TRAIN_NS,
           exported_pod="train-worker-1")
DEDICATED = gpu("GPU-3", "ded-1")
RIVAL = gpu("GPU-4", "pool-1", namespace=RIVAL_NS, pod="rival-0")
NOBODYS = gpu("GPU-5", "pool-2")


def answers() -> Answers:
    gpus: list[Labels] = [BUSY, IDLE, DEDICATED, RIVAL, NOBODYS]
    now = list(zip(gpus, [80.0, 1.0, 0.0, 3.0, 50.0], strict=True))
    peaks = list(zip(gpus, [95.0, 2.0, 0.0, 4.0, 50.0], strict=True))
    used = list(zip(gpus[:4], [40_000.0, 1_000.0, 0.0, 10.0], strict=True))
    return Answers(instant={UTIL: now, PEAK: peaks, USED: used},
                   range_values=[(BUSY, 60.0), (IDLE, 20.0), (RIVAL, 99.0)])


def build_fleet(db: Session, tenancy: Tenancy) -> None:
    host = factories.env_host(db)
    factories.cluster(db, tenancy.acme, host, "train", gpu_class_id=tenancy.h100.id, gpus=2)
    factories.cluster(db, tenancy.globex, host, "rival", gpu_class_id=tenancy.h100.id, gpus=1)
    dedicated = factories.node(db, host, tenancy.h100, "ded-1")
    factories.assignment(db, dedicated, tenancy.acme)
    factories.node(db, host, tenancy.h100, "pool-1")
    db.commit()
