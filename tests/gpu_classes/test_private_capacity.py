"""A private-nodes cluster's machines are capacity of their host, dedicated to the tenant: its
GPUs show in the class's total and dedicated figures, Ready once its nodes joined (issue 57)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.gpu_classes import capacity
from tests import factories


def test_machines_given_to_a_private_nodes_cluster_count_as_dedicated(db: Session) -> None:
    host = factories.env_host(db)
    h100 = factories.gpu_class(db)
    factories.node(db, host, h100, gpu_count=8)
    tenant = factories.tenant(db)
    cluster = factories.cluster(db, tenant, host, placement="private-nodes",
                                gpu_class_id=h100.id, gpus=16)
    for phase in ("joined", "provisioning"):
        factories.machine(db, host, h100, cluster_id=cluster.id, desired="private",
                          phase=phase)
    factories.machine(db, host, h100, phase="available")  # in the pool: nobody's yet

    [figures] = capacity.class_capacities(db, [h100.id]).values()
    assert (figures.total, figures.dedicated, figures.not_ready) == (24, 16, 8)
    assert figures.free == 8  # the shared pool's node, untouched by the machines
    [row] = [r for r in capacity.fleet(db).hosts if r.gpu_class.id == h100.id]
    assert row.sums.dedicated == 16 and row.sums.total == 24
