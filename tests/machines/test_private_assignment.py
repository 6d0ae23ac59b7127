"""A machine serves at most one private-nodes cluster, even for a moment: the database says so
(one ``cluster_id`` column, a private machine always has one) and the assignment is one
conditional UPDATE that only a free machine passes, so clusters racing for the same machines on
real PostgreSQL never share one; a stateful model of assign, release and return agrees with
the rows after every step."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from app.audit.models import AuditEvent
from app.database.core import Database, utcnow
from app.machines import repository, service
from app.machines.models import Machine
from app.tenants.models import Tenant
from tests import factories

RACERS = 8


@contextmanager
def _world(database: Database, clusters: int, machines: int) -> Iterator[tuple[list[int],
                                                                               list[int]]]:
    with database.transaction() as db:
        host = factories.env_host(db)
        gpu = factories.gpu_class(db)
        tenant = factories.tenant(db, "acme")
        cluster_ids = [factories.cluster(db, tenant, host, f"c{i}", placement="private-nodes",
                                         gpu_class_id=gpu.id, gpus=8).id
                       for i in range(clusters)]
        machine_ids = [factories.machine(db, host, gpu, f"m{i}", phase="available",
                                         gpu_count=8).id for i in range(machines)]
    yield cluster_ids, machine_ids


def test_clusters_racing_for_one_machine_on_postgresql_leave_it_with_exactly_one(
        own_pg_database: Database) -> None:
    """Every racer's UPDATE is issued while the first winner has not committed yet: the others
    wait on its row lock, then find it taken (without the condition they would each take it
    in turn and the last would win)."""
    database = own_pg_database
    with _world(database, RACERS, 1) as (cluster_ids, [machine_id]):
        pass
    started = threading.Barrier(RACERS, timeout=30)
    won: list[int] = []
    errors: list[BaseException] = []

    def race(cluster_id: int) -> None:
        try:
            with database.transaction() as db:
                started.wait()
                if repository.assign(db, machine_id, cluster_id, utcnow()):
                    won.append(cluster_id)
                    time.sleep(0.5)  # commit late: the others are blocked on the row now
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=race, args=(c,)) for c in cluster_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert len(won) == 1
    with database.session() as db:
        row = db.get(Machine, machine_id)
        assert row is not None
        assert (row.cluster_id, row.desired) == (won[0], "private")


def test_clusters_picking_from_one_pool_at_once_never_share_a_machine(
        own_pg_database: Database) -> None:
    """Each cluster, as the cluster kind does, reads the free machines and tries to take two;
    whatever the interleaving, every machine ends with at most one cluster and the audit
    trail has one ``machine.assigned`` per machine taken."""
    database = own_pg_database
    with _world(database, RACERS, RACERS + 3) as (cluster_ids, machine_ids):
        pass
    started = threading.Barrier(RACERS, timeout=30)
    taken: dict[int, list[int]] = {c: [] for c in cluster_ids}
    errors: list[BaseException] = []

    def pick(cluster_id: int) -> None:
        try:
            _pick(cluster_id)
        except BaseException as error:
            errors.append(error)

    def _pick(cluster_id: int) -> None:
        with database.transaction() as db:
            free = list(db.scalars(select(Machine.id).order_by(Machine.id)))
            tenant_id = db.scalars(select(Tenant.id)).one()
            started.wait()
            for machine_id in free:
                if len(taken[cluster_id]) == 2:
                    break
                if service.assign_to_cluster(db, machine_id, cluster_id, tenant_id,
                                             f"cluster c{cluster_id}", "test") is not None:
                    taken[cluster_id].append(machine_id)

    threads = [threading.Thread(target=pick, args=(c,)) for c in cluster_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    everyone = [m for got in taken.values() for m in got]
    assert len(everyone) == len(set(everyone)) == len(machine_ids)
    with database.session() as db:
        owners = {m.id: m.cluster_id for m in db.scalars(select(Machine))}
        assigned = db.scalars(select(AuditEvent.target_id).where(
            AuditEvent.action == "machine.assigned")).all()
    assert owners == {m: c for c, got in taken.items() for m in got}
    assert sorted(int(t) for t in assigned) == sorted(everyone)


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_private_machine_without_a_cluster_is_refused_by_the_database(
        backend: str, request: pytest.FixtureRequest) -> None:
    database: Database = request.getfixturevalue(
        "own_pg_database" if backend == "postgresql" else "sqlite_database")
    with _world(database, 1, 1) as (_, [machine_id]):
        pass
    with pytest.raises(IntegrityError), database.transaction() as db:
        db.execute(update(Machine).where(Machine.id == machine_id).values(desired="private"))


# ----- the state machine: assign, release, Metal3 wiping, return


class AssignmentMachine(RuleBasedStateMachine):
    """A model of who holds each machine, against the rows, on the SQLite file the embedded
    default runs on."""

    database_of: ClassVar[Database]
    MACHINES: ClassVar[int] = 4
    CLUSTERS: ClassVar[int] = 3

    def __init__(self) -> None:
        super().__init__()
        self.database = self.database_of
        with self.database.transaction() as db:
            db.execute(update(Machine).values(cluster_id=None, desired="pool",
                                              phase="available", assigned_at=None))
            self.machine_ids = list(db.scalars(select(Machine.id).order_by(Machine.id)))
        # machine -> (cluster holding it or giving it back, still wanted by it)
        self.owner: dict[int, tuple[int, bool] | None] = dict.fromkeys(self.machine_ids)
        # Its phase is available: the machines kind records it once Metal3 has the host in
        # the pool, no image (and calls ``record_returned`` only after seeing exactly that).
        self.available: dict[int, bool] = dict.fromkeys(self.machine_ids, True)

    @rule(machine=st.integers(0, MACHINES - 1), cluster=st.integers(1, CLUSTERS))
    def assign(self, machine: int, cluster: int) -> None:
        machine_id = self.machine_ids[machine]
        with self.database.transaction() as db:
            got = repository.assign(db, machine_id, cluster, utcnow())
        free = self.owner[machine_id] is None and self.available[machine_id]
        assert got == free, (machine_id, self.owner[machine_id])
        if got:
            self.owner[machine_id] = (cluster, True)

    @rule(machine=st.integers(0, MACHINES - 1))
    def release(self, machine: int) -> None:
        machine_id = self.machine_ids[machine]
        with self.database.transaction() as db:
            row = repository.machine_by_id(db, machine_id, lock=True)
            assert row is not None
            service.release_from_cluster(db, row, None, "c", "test", "shrunk")
        held = self.owner[machine_id]
        if held is not None:
            self.owner[machine_id] = (held[0], False)

    @rule(machine=st.integers(0, MACHINES - 1), phase=st.sampled_from(
        ["provisioning", "joined", "deprovisioning", "available"]))
    def metal3_moves(self, machine: int, phase: str) -> None:
        """Metal3 (through the machines kind) reports a phase."""
        machine_id = self.machine_ids[machine]
        with self.database.transaction() as db:
            db.execute(update(Machine).where(Machine.id == machine_id).values(phase=phase))
        self.available[machine_id] = phase == "available"

    @rule(machine=st.integers(0, MACHINES - 1))
    def returned(self, machine: int) -> None:
        machine_id = self.machine_ids[machine]
        with self.database.transaction() as db:
            row = repository.machine_by_id(db, machine_id)
            assert row is not None
            done = service.record_returned(db, row, None, "c")
        held = self.owner[machine_id]
        expected = held is not None and not held[1] and self.available[machine_id]
        assert done == expected
        if done:
            self.owner[machine_id] = None

    @invariant()
    def rows_agree(self) -> None:
        with self.database.session() as db:
            rows = {m.id: m for m in db.scalars(select(Machine))}
        for machine_id, held in self.owner.items():
            row = rows[machine_id]
            assert row.cluster_id == (held[0] if held else None)
            assert row.desired == ("private" if held and held[1] else "pool")


def test_assign_release_and_return_in_any_order_keep_one_holder(
        sqlite_database: Database) -> None:
    with sqlite_database.transaction() as db:
        host = factories.env_host(db)
        gpu = factories.gpu_class(db)
        tenant = factories.tenant(db, "acme")
        for index in range(AssignmentMachine.CLUSTERS):
            factories.cluster(db, tenant, host, f"c{index}", placement="private-nodes")
        for index in range(AssignmentMachine.MACHINES):
            factories.machine(db, host, gpu, f"m{index}", phase="available")
    AssignmentMachine.database_of = sqlite_database
    run_state_machine_as_test(AssignmentMachine, settings=settings(
        max_examples=25, stateful_step_count=25, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
