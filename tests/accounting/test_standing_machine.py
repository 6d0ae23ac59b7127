"""Random sequences of every door that moves a tenant's GPUs, over two regions, two classes and
two tenants: quota approvals and expiries, node dedications and their ends, cluster creates,
resizes, placement changes, sleeps and deletes. After every step:

- ``QuotaRuleMachine``: for each tenant, class and region, the GPUs on its dedicated nodes and
  in its shared-pool and private-nodes clusters (whole free machines, issue 57) stay within its
  approved quota (an expiry may leave it over: then
  no later step adds to the excess), and its dedicated-nodes clusters fit its nodes on each
  host. The figures are summed here from the rows themselves, not by the code under test.
- ``SurfacesMachine`` also: the quota API, the create form's "left", the fleet per host, region
  and class (the approval queue's and ``portalctl fleet``'s figures) and the KAI tenant queue
  built for each host report what those rows say under docs/operator.md's "Quota accounting".

On the code before the one accounting (main at cba2237), ``QuotaRuleMachine`` failed in each of
eight runs within a few steps: quota approved, a node dedicated, then a shared-pool cluster of
the rest of the quota accepted (or the other way round).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.clusters import desired
from app.clusters import repository as clusters_repository
from app.clusters import service as clusters
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate, ClusterResize
from app.database.core import Database, utcnow
from app.fleet import service as fleet
from app.gpu_classes import service as gpu_classes
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kit.errors import ProblemError
from app.nodes import service as nodes
from app.nodes.models import Node, NodeAssignment
from app.nodes.schemas import AssignmentIn
from app.quotas import service as quotas
from app.quotas.models import TenantQuota
from app.quotas.schemas import ApproveIn, QuotaRequestCreate
from app.tenants.models import Tenant
from tests import factories
from tests.clusters.support import cluster_settings

TENANTS = ("alpha", "beta")
REGIONS = ("eu", "us")
CLASSES = {"NVIDIA-H100-80GB-HBM3": 8, "NVIDIA-A100-80GB": 4}  # product -> GPUs per node
NODES_PER_CLASS = 3
PLACEMENTS = ("shared-pool", "dedicated-nodes", "private-nodes")
MACHINES_PER_CLASS = 2  # free bare-metal machines per host and class, for private-nodes
Key = tuple[str, str, str]  # (tenant slug, product, region)
SETTINGS = cluster_settings()


@dataclass
class Held:
    """One key's figures, summed from the rows."""

    approved: int = 0
    dedicated: int = 0
    shared: int = 0
    on_dedicated: int = 0
    private: int = 0

    @property
    def over(self) -> int:
        return max(self.dedicated + self.shared + self.private - self.approved, 0)


class QuotaRuleMachine(RuleBasedStateMachine):
    """Each example in its own outer transaction of the suite's PostgreSQL database, rolled
    back at its end; each step a transaction of its own (a refusal rolls it back)."""

    database_of: ClassVar[Database]

    def __init__(self) -> None:
        super().__init__()
        self._connection = self.database_of.engine.connect()
        self._outer = self._connection.begin()
        self.database = Database.within(self._connection)
        self.clusters: list[tuple[str, str]] = []  # (tenant slug, cluster name) ever made
        self.expiring: list[Any] = []  # ends_at of approved requests that expire
        self.allowed_over: dict[Key, int] = defaultdict(int)
        self.made = 0
        with self.database.transaction() as db:
            self._build(db)

    def teardown(self) -> None:
        self._outer.rollback()
        self._connection.close()

    def _build(self, db: Session) -> None:
        admin = factories.user(db, "platform@example.com", admin=True)
        self.platform = Principal(user=admin, via="token", roles={})
        self.tenant_admins: dict[str, Principal] = {}
        for slug in TENANTS:
            tenant = factories.tenant(db, slug)
            user = factories.user(db, f"admin@{slug}.example.com")
            factories.membership(db, tenant, user, "admin")
            self.tenant_admins[slug] = Principal(user=user, via="token",
                                                 roles={tenant.id: "admin"})
        eu = factories.env_host(db)
        eu.name, eu.region = "eu-1", "eu"
        hosts = [eu, factories.registered_host(db, "us-1", region="us")]
        self.classes = {product: factories.gpu_class(db, product, display_name=product[7:11])
                        for product in CLASSES}
        for host in hosts:
            for product, per_node in CLASSES.items():
                for index in range(NODES_PER_CLASS):
                    factories.node(db, host, self.classes[product], gpu_count=per_node,
                                   name=f"{product[7:11].lower()}-{host.region}-n{index}")
                for index in range(MACHINES_PER_CLASS):
                    factories.machine(db, host, self.classes[product], gpu_count=per_node,
                                      phase="available",
                                      name=f"m-{product[7:11].lower()}-{host.region}-{index}")
        db.flush()

    @contextmanager
    def step(self) -> Iterator[Session]:
        """A transaction whose refusal (a problem answer) is one of the expected outcomes."""
        try:
            with self.database.transaction() as db:
                yield db
        except ProblemError:
            pass

    # ----- quota

    @initialize(grants=st.lists(st.integers(4, 16), min_size=len(TENANTS) * len(CLASSES)
                                * len(REGIONS), max_size=len(TENANTS) * len(CLASSES)
                                * len(REGIONS)))
    def approve_at_first(self, grants: list[int]) -> None:
        """Quota for every key from the start (at least a node's worth of the smaller class), so
        the sequences spend their steps on what moves it."""
        keys = [(t, p, r) for t in TENANTS for p in CLASSES for r in REGIONS]
        for (tenant, product, region), gpus in zip(keys, grants, strict=True):
            self.approve(tenant, product, region, gpus, expires=gpus % 2 == 1)

    @rule(tenant=st.sampled_from(TENANTS), product=st.sampled_from(list(CLASSES)),
          region=st.sampled_from(REGIONS), gpus=st.integers(1, 16), expires=st.booleans())
    def approve(self, tenant: str, product: str, region: str, gpus: int, expires: bool) -> None:
        ends_at = utcnow() + timedelta(days=30 + len(self.expiring)) if expires else None
        with self.step() as db:
            request = quotas.create_request(db, self.tenant_admins[tenant], SETTINGS, tenant,
                                            QuotaRequestCreate(
                                                gpu_class_id=self.classes[product].id,
                                                gpus=gpus, region=region, reason="work",
                                                ends_at=ends_at))
            quotas.approve(db, self.platform, request.id, ApproveIn(overcommit=True))
            if ends_at is not None:
                self.expiring.append(ends_at)

    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        if not self.expiring:
            return
        ends_at = data.draw(st.sampled_from(self.expiring))
        with self.step() as db:
            quotas.expire_quotas(db, ends_at)
        self.expiring = [moment for moment in self.expiring if moment > ends_at]
        with self.database.session() as db:  # an expiry may leave a tenant over: allowed
            for key, held in held_per_key(db).items():
                self.allowed_over[key] = max(self.allowed_over[key], held.over)

    # ----- dedicated nodes

    @rule(data=st.data(), index=st.integers(0, NODES_PER_CLASS - 1))
    def dedicate(self, data: st.DataObject, index: int) -> None:
        """A node of the class and region to a tenant with a quota of at least its GPUs there,
        as an admin would pick."""
        with self.database.session() as db:
            keys = sorted(key for key, held in held_per_key(db).items()
                          if held.approved >= CLASSES[key[1]])
        if not keys:
            return
        tenant, product, region = data.draw(st.sampled_from(keys))
        with self.step() as db:
            nodes.assign_node(db, self.platform, _node_name(product, region, index),
                              AssignmentIn(tenant=tenant), host=f"{region}-1")

    @rule(data=st.data())
    def end_dedication(self, data: st.DataObject) -> None:
        with self.database.session() as db:
            dedicated = sorted((node.name, node.host_cluster_id)
                               for node, _ in _dedicated_nodes(db))
            hosts = dict(db.execute(select(HostCluster.id, HostCluster.name)).all())
        if not dedicated:
            return
        name, host_id = data.draw(st.sampled_from(dedicated))
        with self.step() as db:
            nodes.end_assignment(db, self.platform, name, host=hosts[host_id])

    # ----- clusters

    @rule(tenant=st.sampled_from(TENANTS), product=st.sampled_from(list(CLASSES)),
          region=st.sampled_from((*REGIONS, None)), placement=st.sampled_from(PLACEMENTS),
          gpus=st.integers(1, 10))
    def create(self, tenant: str, product: str, region: str | None, placement: str,
               gpus: int) -> None:
        self._create(tenant, product, region, placement, gpus)

    def _create(self, tenant: str, product: str, region: str | None, placement: str,
                gpus: int) -> bool:
        self.made += 1
        name = f"c{self.made}"
        with self.step() as db:
            clusters.create_cluster(db, self.tenant_admins[tenant], SETTINGS, tenant,
                                    ClusterCreate(name=name, gpu_class_id=self.classes[product].id,
                                                  gpus=gpus, region=region,
                                                  placement=placement))
            self.clusters.append((tenant, name))
            return True
        return False

    @rule(data=st.data())
    def take_the_rest_of_the_quota(self, data: st.DataObject) -> None:
        """A shared-pool cluster of all the approved GPUs of a region no cluster holds: what a
        tenant reading its quota page asks for."""
        with self.database.session() as db:
            keys = sorted(key for key, held in held_per_key(db).items()
                          if held.approved > held.shared + held.on_dedicated + held.private)
        if keys:
            tenant, product, region = data.draw(st.sampled_from(keys))
            with self.database.session() as db:
                held = held_per_key(db)[tenant, product, region]
            self._create(tenant, product, region, "shared-pool",
                         held.approved - held.shared - held.on_dedicated - held.private)

    @rule(data=st.data(), gpus=st.integers(0, 12))
    def resize(self, data: st.DataObject, gpus: int) -> None:
        if self.clusters:
            tenant, name = data.draw(st.sampled_from(self.clusters))
            with self.step() as db:
                clusters.resize_cluster(db, self.tenant_admins[tenant], tenant, name,
                                        ClusterResize(gpus=gpus))

    @rule(data=st.data())
    def change_placement(self, data: st.DataObject) -> None:
        """The tenant's way to another placement: a new cluster of the same size and region
        with the other placement, then the old one deleted."""
        if not self.clusters:
            return
        tenant, name = data.draw(st.sampled_from(self.clusters))
        with self.database.session() as db:
            found = _cluster(db, tenant, name)
            if found is None or found.gpu_class_id is None:
                return
            product = next(p for p, c in self.classes.items() if c.id == found.gpu_class_id)
            other = PLACEMENTS[(PLACEMENTS.index(found.placement) + 1) % len(PLACEMENTS)]
            host = db.get(HostCluster, found.host_cluster_id)
            region = host.region if host else None
            gpus = found.gpus
        if self._create(tenant, product, region, other, gpus):
            with self.step() as db:
                clusters.delete_cluster(db, self.tenant_admins[tenant], tenant, name)

    @rule(data=st.data(), asleep=st.booleans())
    def sleep_or_wake(self, data: st.DataObject, asleep: bool) -> None:
        if self.clusters:
            tenant, name = data.draw(st.sampled_from(self.clusters))
            with self.step() as db:
                clusters.change_power(db, self.tenant_admins[tenant], tenant, name,
                                      "asleep" if asleep else "awake")

    @rule(data=st.data(), finished=st.booleans())
    def delete(self, data: st.DataObject, finished: bool) -> None:
        """A deletion asked for; ``finished``: the worker removed everything, the row goes."""
        if not self.clusters:
            return
        tenant, name = data.draw(st.sampled_from(self.clusters))
        with self.step() as db:
            cluster = clusters.delete_cluster(db, self.tenant_admins[tenant], tenant, name)
            if finished:
                clusters_repository.delete_cluster_row(db, cluster.id)

    # ----- what must hold after every step

    @invariant()
    def within_quota(self) -> None:
        with self.database.session() as db:
            for key, held in held_per_key(db).items():
                assert held.over <= self.allowed_over[key], (
                    f"{key}: {held.dedicated} dedicated + {held.shared} in shared-pool clusters "
                    f"+ {held.private} in private-nodes clusters on {held.approved} approved "
                    f"({self.allowed_over[key]} over allowed)")
                self.allowed_over[key] = held.over
            for (tenant, product, host), (on_nodes, held_there) in per_host(db).items():
                assert held_there <= on_nodes, (
                    f"{tenant} {product} on {host}: dedicated-nodes clusters hold {held_there} "
                    f"of {on_nodes} dedicated GPUs")


class SurfacesMachine(QuotaRuleMachine):
    """The rule, and every surface showing the figures agreeing with the rows."""

    @invariant()
    def surfaces_agree(self) -> None:
        with self.database.session() as db:
            held = held_per_key(db)
            for slug in TENANTS:
                self._tenant_surfaces(db, slug, held)
            self._fleet_surfaces(db, held)
            self._kai_tenant_queues(db, held)

    def _tenant_surfaces(self, db: Session, slug: str, held: dict[Key, Held]) -> None:
        principal = self.tenant_admins[slug]
        rows = quotas.tenant_quota(db, principal, slug, quotas.ALL_QUOTA_ROWS).items
        for row in rows:
            figures = held.get((slug, row.gpu_class, row.region), Held())
            shown = {name: getattr(row, name, None) for name in (
                "approved_gpus", "dedicated_gpus", "shared_pool_allocated_gpus",
                "dedicated_allocated_gpus", "private_nodes_allocated_gpus",
                "shared_pool_left_gpus", "over_quota_gpus", "shared_pool_gpus")}
            assert shown == {
                "approved_gpus": figures.approved, "dedicated_gpus": figures.dedicated,
                "shared_pool_allocated_gpus": figures.shared,
                "dedicated_allocated_gpus": figures.on_dedicated,
                "private_nodes_allocated_gpus": figures.private,
                "shared_pool_left_gpus": max(figures.approved - figures.dedicated
                                             - figures.shared - figures.private, 0),
                "over_quota_gpus": figures.over,
                "shared_pool_gpus": _pool_guarantee(figures)}, (slug, row.gpu_class, row.region)
        left = {room.product: room.left for room in quotas.room_per_class(db, principal, slug)}
        expected: dict[str, int] = defaultdict(int)
        for (tenant, product, _), figures in held.items():
            if tenant == slug and figures.approved:
                expected[product] += max(figures.approved - figures.dedicated - figures.shared
                                         - figures.private, 0)
        assert left == {product: expected[product] for product in left}, (slug, "form")

    def _fleet_surfaces(self, db: Session, held: dict[Key, Held]) -> None:
        shown = fleet.capacity(db, self.platform, fleet.FleetFilters())
        placed: dict[tuple[str, str], int] = defaultdict(int)
        for cluster, host in db.execute(select(VirtualCluster, HostCluster.name).join(
                HostCluster, HostCluster.id == VirtualCluster.host_cluster_id)):
            if cluster.placement == "shared-pool" and cluster.gpu_class_id:
                placed[host, _product(self.classes, cluster.gpu_class_id)] += cluster.gpus
        for host_row in shown.hosts:
            assert host_row.shared_guaranteed == placed[
                host_row.host_cluster, host_row.gpu_class], (host_row.host_cluster, "host")
        pool: dict[tuple[str, str], int] = defaultdict(int)
        for (_, product, region), figures in held.items():
            pool[region, product] += _pool_guarantee(figures)
        for region_row in shown.regions:
            assert region_row.shared_guaranteed == pool[region_row.region, region_row.gpu_class]
            [capacity] = gpu_classes.capacities(
                db, [self.classes[region_row.gpu_class].id], region_row.region).values()
            assert (capacity.guaranteed, capacity.free) == (
                region_row.guaranteed, region_row.free), (region_row.region, "queue")

    def _kai_tenant_queues(self, db: Session, held: dict[Key, Held]) -> None:
        for slug in TENANTS:
            tenant = db.scalar(select(Tenant).where(Tenant.slug == slug))
            assert tenant is not None
            for host in db.scalars(select(HostCluster)):
                asleep = sum(c.gpus for c in db.scalars(select(VirtualCluster).where(
                    VirtualCluster.tenant_id == tenant.id,
                    VirtualCluster.host_cluster_id == host.id,
                    VirtualCluster.placement == "shared-pool", VirtualCluster.power == "asleep")))
                guarantee = sum(_pool_guarantee(figures) for (t, _, region), figures
                                in held.items() if t == slug and region == host.region)
                spec = desired.tenant_spec(desired.read_tenant(db, tenant, host.region, host.id))
                assert spec.guaranteed_gpus == max(guarantee - asleep, 0), (slug, host.name)


def _pool_guarantee(figures: Held) -> int:
    return max(figures.approved - figures.dedicated - figures.private, figures.shared)


def _node_name(product: str, region: str, index: int) -> str:
    return f"{product[7:11].lower()}-{region}-n{index}"


def _product(classes: dict[str, Any], class_id: int) -> str:
    return next(product for product, row in classes.items() if row.id == class_id)


def _cluster(db: Session, slug: str, name: str) -> VirtualCluster | None:
    return db.scalar(select(VirtualCluster).join(Tenant, Tenant.id == VirtualCluster.tenant_id)
                     .where(Tenant.slug == slug, VirtualCluster.name == name))


def held_per_key(db: Session) -> dict[Key, Held]:
    """Every key's figures, summed in Python from the quota, node and cluster rows."""
    slugs = dict(db.execute(select(Tenant.id, Tenant.slug)).all())
    products = dict(db.execute(select(GpuClass.id, GpuClass.product)).all())
    regions = dict(db.execute(select(HostCluster.id, HostCluster.region)).all())
    found: dict[Key, Held] = defaultdict(Held)
    for quota in db.scalars(select(TenantQuota)):
        found[slugs[quota.tenant_id], products[quota.gpu_class_id], quota.region].approved += (
            quota.gpus)
    for node, tenant_id in _dedicated_nodes(db):
        found[slugs[tenant_id], products[node.gpu_class_id or 0],
              regions[node.host_cluster_id]].dedicated += node.gpu_count
    for cluster in db.scalars(select(VirtualCluster).where(VirtualCluster.gpus > 0)):
        key = (slugs[cluster.tenant_id], products[cluster.gpu_class_id or 0],
               regions[cluster.host_cluster_id])
        if cluster.placement == "shared-pool":
            found[key].shared += cluster.gpus
        elif cluster.placement == "private-nodes":
            found[key].private += cluster.gpus
        else:
            found[key].on_dedicated += cluster.gpus
    return dict(found)


def per_host(db: Session) -> dict[tuple[int, int, int], tuple[int, int]]:
    """(tenant, class, host) -> its dedicated GPUs there, and its dedicated-nodes clusters'."""
    found: dict[tuple[int, int, int], list[int]] = defaultdict(lambda: [0, 0])
    for node, tenant_id in _dedicated_nodes(db):
        found[tenant_id, node.gpu_class_id or 0, node.host_cluster_id][0] += node.gpu_count
    for cluster in db.scalars(select(VirtualCluster).where(
            VirtualCluster.placement == "dedicated-nodes", VirtualCluster.gpus > 0)):
        found[cluster.tenant_id, cluster.gpu_class_id or 0, cluster.host_cluster_id][1] += (
            cluster.gpus)
    return {key: (on_nodes, held) for key, (on_nodes, held) in found.items()}


def _dedicated_nodes(db: Session) -> list[tuple[Node, int]]:
    rows = db.execute(select(Node, NodeAssignment.tenant_id)
                      .join(NodeAssignment, NodeAssignment.node_id == Node.id)
                      .where(NodeAssignment.ended_at.is_(None), Node.gone_at.is_(None)))
    return [(node, tenant_id) for node, tenant_id in rows]


# No shrinking: on a broken build it took minutes; the failing sequence is printed whole.
MACHINE_SETTINGS = settings(max_examples=20, stateful_step_count=30, deadline=None,
                            database=None, suppress_health_check=list(HealthCheck),
                            phases=[Phase.explicit, Phase.reuse, Phase.generate])


def test_no_sequence_of_doors_breaks_the_quota_rule(pg_engine_database: Database) -> None:
    QuotaRuleMachine.database_of = pg_engine_database
    run_state_machine_as_test(QuotaRuleMachine, settings=MACHINE_SETTINGS)


def test_every_surface_reports_the_rows_figures(pg_engine_database: Database) -> None:
    """Fewer sequences: each step reads every surface."""
    SurfacesMachine.database_of = pg_engine_database
    run_state_machine_as_test(SurfacesMachine, settings=settings(MACHINE_SETTINGS,
                                                                 max_examples=5))
