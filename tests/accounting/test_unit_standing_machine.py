"""Random sequences of quota rows, node dedications and clusters in every unit (whole GPUs, MIG
slices of two profiles, shares of one GPU), written as the doors will write them, over two
regions and two tenants. After every step the one accounting and the capacity figures agree with
sums made here from the rows, in each unit's steps:

- each (tenant, class, region, unit, profile) standing (``every_standing``, ``standing``);
- whole-GPU standings equal what the ``gpus`` columns of every row give, whatever the rows of
  the other units (they never leak into whole GPUs);
- what each region's shared pool guarantees per unit (``pool_guarantees``), and the class's
  capacity there: whole GPUs free less the shares rounded up, slices free per profile.

The doors themselves (requests, approvals, clusters in units) are issue 61's other parts; the
rules here write the rows they will write.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from math import ceil
from typing import Any, ClassVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.accounting import standing as accounting
from app.accounting.standing import Standing
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.gpu_classes.capacity import free_steps
from app.gpu_classes.service import capacities
from app.hosts.models import HostCluster
from app.kit.gpu_units import SHARE, GrantUnit
from app.nodes.models import Node, NodeAssignment
from app.quotas.models import TenantQuota
from tests import factories

TENANTS = ("alpha", "beta")
REGIONS = ("eu", "us")
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
# What a grant can be: (class, unit); the share and the whole GPUs of one class side by side.
GRANTS = ((H100, GrantUnit("gpu")), (H100, GrantUnit("share")),
          (A100, GrantUnit("mig", "1g.10gb")), (A100, GrantUnit("mig", "3g.40gb")))
SLICES = {"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4}
PLACEMENTS = ("shared-pool", "dedicated-nodes", "private-nodes")
Key = tuple[int, int, str, str, str]


@dataclass
class Rows:
    """What the rows say, read back with the ORM."""

    quotas: list[TenantQuota]
    clusters: list[tuple[VirtualCluster, str]]  # with its host's region
    dedicated: list[tuple[Node, int, str]]  # a node, its tenant, its host's region
    nodes: list[tuple[Node, str]]


def _rows(db: Session) -> Rows:
    regions = dict(db.execute(select(HostCluster.id, HostCluster.region)).all())
    assigned = db.execute(select(Node, NodeAssignment.tenant_id)
                          .join(NodeAssignment, NodeAssignment.node_id == Node.id)
                          .where(NodeAssignment.ended_at.is_(None)))
    return Rows(list(db.scalars(select(TenantQuota))),
                [(c, regions[c.host_cluster_id]) for c in db.scalars(select(VirtualCluster))],
                [(node, tenant, regions[node.host_cluster_id]) for node, tenant in assigned],
                [(node, regions[node.host_cluster_id]) for node in db.scalars(select(Node))])


def _expected_standings(rows: Rows) -> dict[Key, Standing]:
    figures: dict[Key, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for quota in rows.quotas:
        figures[quota.tenant_id, quota.gpu_class_id, quota.region, quota.unit,
                quota.mig_profile][0] = quota.amount
    for node, tenant, region in rows.dedicated:
        figures[tenant, node.gpu_class_id or 0, region, "gpu", ""][1] += node.gpu_count
    column = {"shared-pool": 2, "dedicated-nodes": 3, "private-nodes": 4}
    for cluster, region in rows.clusters:
        if cluster.amount > 0 and cluster.gpu_class_id is not None:
            figures[cluster.tenant_id, cluster.gpu_class_id, region, cluster.unit,
                    cluster.mig_profile][column[cluster.placement]] += cluster.amount
    return {key: Standing(*values) for key, values in figures.items()}


def _whole_from_gpus_columns(rows: Rows) -> dict[tuple[int, int, str], Standing]:
    """Whole GPUs as the code before the units summed them: every row's ``gpus``."""
    figures: dict[tuple[int, int, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for quota in rows.quotas:
        figures[quota.tenant_id, quota.gpu_class_id, quota.region][0] += quota.gpus
    for node, tenant, region in rows.dedicated:
        figures[tenant, node.gpu_class_id or 0, region][1] += node.gpu_count
    column = {"shared-pool": 2, "dedicated-nodes": 3, "private-nodes": 4}
    for cluster, region in rows.clusters:
        if cluster.gpu_class_id is not None:
            figures[cluster.tenant_id, cluster.gpu_class_id, region][
                column[cluster.placement]] += cluster.gpus
    return {key: Standing(*values) for key, values in figures.items()}


def _pool(standings: dict[Key, Standing], rows: Rows) -> dict[tuple[str, int, str, str], int]:
    with_quota = {(q.tenant_id, q.gpu_class_id, q.region, q.unit, q.mig_profile)
                  for q in rows.quotas}
    found: dict[tuple[str, int, str, str], int] = defaultdict(int)
    for key in with_quota:
        found[key[2], key[1], key[3], key[4]] += standings[key].shared_guarantee
    return dict(found)


class UnitStandingMachine(RuleBasedStateMachine):
    database_of: ClassVar[Database]

    def __init__(self) -> None:
        super().__init__()
        self._connection = self.database_of.engine.connect()
        self._outer = self._connection.begin()
        self.database = Database.within(self._connection)
        self.made = 0
        with self.database.transaction() as db:
            self._build(db)

    def teardown(self) -> None:
        self._outer.rollback()
        self._connection.close()

    def _build(self, db: Session) -> None:
        self.tenants = [factories.tenant(db, slug).id for slug in TENANTS]
        h100, a100 = factories.gpu_class(db, H100, share_step=25), factories.gpu_class(db, A100)
        self.classes = {H100: h100.id, A100: a100.id}
        self.hosts: dict[str, int] = {}
        for region in REGIONS:
            host = factories.host_cluster(db, f"gpu-{region}", region)
            self.hosts[region] = host.id
            for index in range(2):  # one of them not Ready
                factories.node(db, host, h100, f"h100-{region}-{index}", gpu_count=8,
                               ready=index == 0)
            factories.node(db, host, a100, f"a100-{region}", gpu_count=0, mig_strategy="mixed",
                           mig_resources=SLICES)

    # ----- the rows the doors write

    @rule(tenant=st.sampled_from(range(len(TENANTS))), grant=st.sampled_from(GRANTS),
          region=st.sampled_from(REGIONS), amount=st.integers(0, 16))
    def set_quota(self, tenant: int, grant: tuple[str, GrantUnit], region: str,
                  amount: int) -> None:
        product, unit = grant
        amount = amount * 25 if unit.kind == "share" else amount
        with self.database.transaction() as db:
            row = db.scalar(select(TenantQuota).where(
                TenantQuota.tenant_id == self.tenants[tenant],
                TenantQuota.gpu_class_id == self.classes[product],
                TenantQuota.region == region, TenantQuota.unit == unit.kind,
                TenantQuota.mig_profile == unit.profile))
            if row is None:
                row = TenantQuota(tenant_id=self.tenants[tenant], region=region,
                                  gpu_class_id=self.classes[product], unit=unit.kind,
                                  mig_profile=unit.profile, gpus=0, amount=0)
                db.add(row)
            if unit.is_whole:
                row.gpus = amount  # as every door before the units: amount follows
            else:
                row.amount = amount

    @rule(tenant=st.sampled_from(range(len(TENANTS))), region=st.sampled_from(REGIONS),
          index=st.integers(0, 1), dedicate=st.booleans())
    def dedication(self, tenant: int, region: str, index: int, dedicate: bool) -> None:
        with self.database.transaction() as db:
            node = db.scalars(select(Node).where(Node.name == f"h100-{region}-{index}")).one()
            db.execute(delete(NodeAssignment).where(NodeAssignment.node_id == node.id))
            if dedicate:
                db.add(NodeAssignment(node_id=node.id, tenant_id=self.tenants[tenant]))

    @rule(tenant=st.sampled_from(range(len(TENANTS))), grant=st.sampled_from(GRANTS),
          region=st.sampled_from(REGIONS), placement=st.sampled_from(PLACEMENTS),
          amount=st.integers(0, 12))
    def add_cluster(self, tenant: int, grant: tuple[str, GrantUnit], region: str,
                    placement: str, amount: int) -> None:
        product, unit = grant
        self.made += 1
        fields: dict[str, Any] = (
            {"gpus": amount, "placement": placement} if unit.is_whole else
            {"gpus": 0, "unit": unit.kind, "mig_profile": unit.profile,
             "amount": amount * 25 if unit.kind == "share" else amount})
        with self.database.transaction() as db:
            db.add(VirtualCluster(tenant_id=self.tenants[tenant], name=f"c{self.made}",
                                  host_cluster_id=self.hosts[region], kubernetes_version="1.32.4",
                                  gpu_class_id=self.classes[product],
                                  **{"placement": "shared-pool", **fields}))

    @rule(data=st.data(), amount=st.integers(0, 12), gone=st.booleans())
    def resize_or_delete(self, data: st.DataObject, amount: int, gone: bool) -> None:
        with self.database.transaction() as db:
            clusters = list(db.scalars(select(VirtualCluster).order_by(VirtualCluster.id)))
            if not clusters:
                return
            cluster = data.draw(st.sampled_from(clusters))
            if gone:
                db.delete(cluster)
            elif cluster.unit == "gpu":
                cluster.gpus = amount
            else:
                cluster.amount = amount * 25 if cluster.unit == "share" else amount

    # ----- what must hold after every step

    @invariant()
    def standings_agree(self) -> None:
        with self.database.session() as db:
            rows = _rows(db)
            expected = _expected_standings(rows)
            found = accounting.every_standing(db)
            assert found == expected
            for key, figures in expected.items():
                unit = GrantUnit(key[3], key[4])  # type: ignore[arg-type]
                assert accounting.standing(db, key[0], key[1], key[2], unit=unit) == figures, key
            whole = {key[:3]: figures for key, figures in found.items() if key[3] == "gpu"}
            for of_whole, figures in _whole_from_gpus_columns(rows).items():
                assert whole.get(of_whole, Standing()) == figures, ("whole GPUs", of_whole)

    @invariant()
    def pool_and_capacity_agree(self) -> None:
        with self.database.session() as db:
            rows = _rows(db)
            pool = _pool(_expected_standings(rows), rows)
            found = {(str(r[0]), r[1], str(r[2]), str(r[3])): int(r[4])
                     for r in db.execute(accounting.pool_guarantees())}
            assert found == pool
            for region in REGIONS:
                self._capacity_of(db, rows, region, pool)

    def _capacity_of(self, db: Session, rows: Rows, region: str,
                     pool: dict[tuple[str, int, str, str], int]) -> None:
        figures = capacities(db, list(self.classes.values()), region)
        h100 = figures[self.classes[H100]]
        dedicated_ids = {node.id for node, _, _ in rows.dedicated}
        ready_shared = sum(node.gpu_count for node, of in rows.nodes
                           if of == region and node.ready and node.id not in dedicated_ids)
        whole = pool.get((region, self.classes[H100], "gpu", ""), 0)
        shares = pool.get((region, self.classes[H100], "share", ""), 0)
        assert (h100.shared_guaranteed, h100.shared_fraction_gpus, h100.free) == (
            whole, ceil(shares / 100), ready_shared - whole - ceil(shares / 100)), region
        assert free_steps(h100, SHARE) == h100.free * 100 + ceil(shares / 100) * 100 - shares
        assert h100.total == h100.guaranteed + h100.free + h100.not_ready - sum(
            node.gpu_count for node, _, of in rows.dedicated if of == region and not node.ready)
        a100 = figures[self.classes[A100]]
        for profile in a100.mig_profiles:
            guaranteed = pool.get((region, self.classes[A100], "mig", profile.profile), 0)
            ready = SLICES[f"nvidia.com/mig-{profile.profile}"]
            assert (profile.ready, profile.guaranteed, profile.free) == (
                ready, guaranteed, ready - guaranteed), (region, profile.profile)
            assert free_steps(a100, GrantUnit("mig", profile.profile)) == profile.free
        assert (a100.total, a100.free) == (0, 0)


MACHINE_SETTINGS = settings(max_examples=15, stateful_step_count=25, deadline=None,
                            database=None, suppress_health_check=list(HealthCheck),
                            phases=[Phase.explicit, Phase.reuse, Phase.generate])


def test_every_unit_is_counted_in_its_steps_and_whole_gpus_as_before(
        pg_engine_database: Database) -> None:
    UnitStandingMachine.database_of = pg_engine_database
    run_state_machine_as_test(UnitStandingMachine, settings=MACHINE_SETTINGS)

