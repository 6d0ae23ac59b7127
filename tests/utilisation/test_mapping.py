"""Series mapped to tenants and clusters: a shared-pool cluster's pods by their host namespace,
a dedicated node and a private node by node name; another tenant's pod and nobody's GPU never
counted for a tenant."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.utilisation import repository
from app.utilisation.mapping import Owner, Ownership, figures, gpus_of
from app.utilisation.service import history_query
from tests import factories
from tests.support.tenancy import build_tenancy
from tests.utilisation.support import BUSY, DEDICATED, IDLE, NOBODYS, RIVAL, build_fleet, gpu

H100 = "NVIDIA-H100-80GB-HBM3"


def test_each_gpu_goes_to_the_tenant_and_cluster_that_holds_it(db: Session) -> None:
    tenancy = build_tenancy(db, nodes=0)
    build_fleet(db, tenancy)
    samples = [(BUSY, 80.0), (IDLE, 1.0), (DEDICATED, 0.0), (RIVAL, 3.0), (NOBODYS, 50.0)]
    gpus = gpus_of(samples, repository.ownership(db), {}, {})
    owners = {g.key: g.owner for g in gpus}
    assert owners == {"GPU-1": Owner("acme", "train", H100), "GPU-2": Owner("acme", "train", H100),
                      "GPU-3": Owner("acme", None, H100),
                      "GPU-4": Owner("globex", "rival", H100)}
    acme_train = [g for g in gpus if g.owner.cluster == "train"]
    assert {g.pod for g in acme_train} == {"train-worker-0", "train-worker-1"}
    shown = figures(acme_train, 5)
    assert (shown.gpus_bound, shown.utilisation_percent) == (2, 40.5)


def test_a_private_node_is_its_clusters_and_an_ended_assignment_no_ones(db: Session) -> None:
    tenancy = build_tenancy(db, nodes=0)
    host = factories.env_host(db)
    metal = factories.cluster(db, tenancy.acme, host, "metal", placement="private-nodes",
                              gpu_class_id=tenancy.h100.id, gpus=8)
    factories.machine(db, host, tenancy.h100, "m-1", cluster_id=metal.id, desired="private",
                      phase="joined", node_name="m-1")
    ended = factories.assignment(db, factories.node(db, host, tenancy.h100, "was-acme"),
                                 tenancy.acme)
    ended.ended_at = ended.created_at
    db.flush()
    gpus = gpus_of([(gpu("GPU-7", "m-1"), 10.0), (gpu("GPU-8", "was-acme"), 0.0)],
                   repository.ownership(db), {}, {})
    assert [(g.key, g.owner) for g in gpus] == [("GPU-7", Owner("acme", "metal", H100))]


def test_idle_means_the_windows_peak_is_below_the_threshold() -> None:
    ownership = Ownership(by_namespace={}, by_node={"n": Owner("acme", None)})
    gpus = gpus_of([(gpu("GPU-1", "n"), 0.0), (gpu("GPU-2", "n"), 0.0),
                    (gpu("GPU-3", "n"), 0.0)], ownership, {},
                   {"GPU-1": 4.9, "GPU-2": 30.0})
    # GPU-2 computed within the window; GPU-3's window is unknown: neither is called idle.
    assert [g.key for g in gpus if g.idle(5)] == ["GPU-1"]
    assert figures(gpus, 5).gpus_idle == 1


def test_the_exporters_other_label_spellings_map_alike() -> None:
    """dcgm-exporter's newer ``hostname`` and ``--use-old-namespace``'s ``pod_namespace``."""
    ownership = Ownership(by_namespace={"t-acme-train": Owner("acme", "train")},
                          by_node={"ded-1": Owner("acme", None)})
    gpus = gpus_of([({"uuid": "GPU-1", "hostname": "ded-1"}, 1.0),
                    ({"UUID": "GPU-2", "hostname": "pool-1", "pod_namespace": "t-acme-train",
                      "pod_name": "p"}, 2.0)], ownership, {}, {})
    assert [(g.key, g.owner.cluster, g.node, g.pod) for g in gpus] == [
        ("GPU-1", None, "ded-1", ""), ("GPU-2", "train", "pool-1", "p")]


def test_the_days_chart_asks_only_for_the_clusters_namespaces_and_nodes() -> None:
    ownership = Ownership(by_namespace={"t-acme-train": Owner("acme", "train"),
                                        "t-globex-rival": Owner("globex", "rival")},
                          by_node={"m-1": Owner("acme", "train"), "ded-1": Owner("acme", None)})
    query = history_query(ownership, lambda o: (o.tenant, o.cluster) == ("acme", "train"))
    assert 'DCGM_FI_DEV_GPU_UTIL{namespace="t-acme-train"}' in query
    assert 'DCGM_FI_DEV_GPU_UTIL{exported_namespace="t-acme-train"}' in query
    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="m-1"} or DCGM_FI_DEV_GPU_UTIL{hostname="m-1"}' in query
    assert "rival" not in query and "ded-1" not in query
