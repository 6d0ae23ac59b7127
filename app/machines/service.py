"""Bare-metal machines: register, provision, release, delete, rotate BMC credentials; and the
worker's part (what it reads of a machine, what it records back).

Platform admins only. BMC credentials come in, are sealed with the portal's SecretBox and never
go out again: the API shows when they were set. The worker opens them only to write the
BareMetalHost's BMC Secret. Every change of desired state bumps the machine's generation,
is audited and enqueues the machine for the worker in the same transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounting.read_models import virtual_clusters
from app.audit import service as audit
from app.auth.principal import Principal
from app.authz import ensure_platform_admin, ensure_platform_writer
from app.database.concurrency import insert_or_conflict
from app.database.core import utcnow
from app.gpu_classes import repository as gpu_class_repository
from app.gpu_classes.models import GpuClass
from app.hosts import repository as hosts_repository
from app.hosts.models import HostCluster
from app.http.pagination import Page, PageParams, paginate
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kit.errors import Conflict, NotFound, ValidationFailed
from app.machines import repository
from app.machines.lifecycle import Observed, blocked, conditions_of, reading
from app.machines.models import Machine
from app.machines.schemas import BmcCredentialsIn, MachineOut, MachineRegister
from app.nodes import repository as nodes_repository
from app.nodes.schemas import Condition
from app.tenants.models import Tenant
from app.workqueue import MACHINES, NODES, enqueue

TARGET_TYPE = "machine"
WORKER = "machine-reconciler"
# What a machine is asked to join: its host cluster, or a private-nodes cluster.
JOINING = ("provisioned", "private")
# Phases from which a machine may leave the portal: nothing is imaged on it.
DELETABLE_PHASES = ("registering", "inspecting", "available", "failed")


# ----- reading


def machine_out(db: Session, row: Machine) -> MachineOut:
    served = served_cluster(db, row)
    cluster = served[1] if served else None
    host = hosts_repository.host_by_id(db, row.host_cluster_id)
    gpu_class = db.get(GpuClass, row.gpu_class_id)
    return MachineOut(
        id=row.id, name=row.name, host_cluster=host.name if host else "",
        bmc_address=row.bmc_address, bmc_credentials_set_at=row.bmc_credentials_set_at,
        boot_mac=row.boot_mac, gpu_class=gpu_class.product if gpu_class else "",
        gpu_count=row.gpu_count, rack=row.rack, desired=row.desired,
        deleting=row.deleting_at is not None, phase=row.phase,
        reason=row.reason, provisioning_state=row.provisioning_state, node_name=row.node_name,
        tenant=_tenant_of_node(db, row), cluster=cluster, assigned_at=row.assigned_at,
        generation=row.generation,
        observed_generation=row.observed_generation,
        conditions=[Condition.model_validate(c) for c in row.conditions or []],
        created_at=row.created_at, updated_at=row.updated_at)


def list_machines(db: Session, principal: Principal,
                  paging: PageParams | None = None) -> Page[MachineOut]:
    ensure_platform_admin(principal)
    rows, cursor = paginate(db, select(Machine), Machine.id, paging or PageParams(limit=200))
    return Page(items=[machine_out(db, row) for row in rows], next_cursor=cursor)


def get_machine(db: Session, principal: Principal, name: str) -> MachineOut:
    ensure_platform_admin(principal)
    return machine_out(db, _machine(db, name))


def _machine(db: Session, name: str, *, lock: bool = False) -> Machine:
    row = repository.machine_by_name(db, name, lock=lock)
    if row is None:
        raise NotFound(f"no machine {name!r}")
    return row


def _tenant_of_node(db: Session, row: Machine) -> str | None:
    served = served_cluster(db, row)
    if served is not None:
        return served[0]
    tenant = _dedicated_to(db, row)
    return tenant.slug if tenant else None


def served_cluster(db: Session, row: Machine) -> tuple[str, str] | None:
    """(tenant slug, cluster name) of the private-nodes cluster the machine serves."""
    if row.cluster_id is None:
        return None
    clusters = virtual_clusters.c
    found = db.execute(select(Tenant.slug, clusters.name)
                       .join(virtual_clusters, clusters.tenant_id == Tenant.id)
                       .where(clusters.id == row.cluster_id)).first()
    return (str(found[0]), str(found[1])) if found else None


def _refuse_while_private(row: Machine) -> None:
    if row.cluster_id is not None:
        raise Conflict(f"machine {row.name} serves a private-nodes cluster: its tenant "
                       "releases it by shrinking or deleting the cluster; it comes back to "
                       "the pool on its own")


def _dedicated_to(db: Session, row: Machine) -> Tenant | None:
    if not row.node_name:
        return None
    node = nodes_repository.node_by_name(db, row.host_cluster_id, row.node_name)
    assignment = nodes_repository.active_assignment(db, node.id) if node else None
    return db.get(Tenant, assignment.tenant_id) if assignment else None


# ----- changing


def register_machine(db: Session, principal: Principal, settings: Settings,
                     payload: MachineRegister) -> MachineOut:
    ensure_platform_writer(principal)
    host = _host(db, payload.host_cluster)
    gpu_class = gpu_class_repository.class_by_product(db, payload.gpu_class)
    if gpu_class is None:
        raise ValidationFailed.on_field("gpu_class", f"there is no GPU class "
                                                     f"{payload.gpu_class!r}")
    taken = Conflict(f"a machine named {payload.name!r} exists already",
                     errors=[{"field": "name", "message": "this name is taken"}])
    if repository.machine_by_name(db, payload.name) is not None:
        raise taken
    row = Machine(name=payload.name, host_cluster_id=host.id, bmc_address=payload.bmc_address,
                  bmc_credentials_encrypted=_sealed(settings, payload.bmc),
                  bmc_credentials_set_at=utcnow(), boot_mac=payload.boot_mac,
                  gpu_class_id=gpu_class.id, gpu_count=payload.gpu_count, rack=payload.rack,
                  desired="pool", phase="registering", reason="", provisioning_state="",
                  generation=1, observed_generation=0, conditions=[])
    insert_or_conflict(db, row, taken)
    _changed(db, principal, "machine.register", row, None)
    return machine_out(db, row)


def provision(db: Session, principal: Principal, name: str) -> MachineOut:
    """Asks Metal3 to image the machine so that it joins its host cluster; asking again
    changes nothing."""
    ensure_platform_writer(principal)
    row = _machine(db, name, lock=True)
    _refuse_while_deleting(row)
    _refuse_while_private(row)
    if row.desired != "provisioned":
        before = _details(row)
        row.desired = "provisioned"
        _changed(db, principal, "machine.provision", row, before)
    return machine_out(db, row)


def release(db: Session, principal: Principal, name: str) -> MachineOut:
    """Deprovisions the machine (Metal3 cleans it) and returns it to the pool; refused while
    its node is dedicated to a tenant, who would lose it silently."""
    ensure_platform_writer(principal)
    row = _machine(db, name, lock=True)
    _refuse_while_deleting(row)
    _refuse_while_private(row)
    tenant = _dedicated_to(db, row)
    if tenant is not None:
        raise Conflict(f"machine {row.name}'s node {row.node_name} is dedicated to tenant "
                       f"{tenant.slug}: end that assignment before releasing the machine")
    if row.desired != "pool":
        before = _details(row)
        row.desired = "pool"
        _changed(db, principal, "machine.release", row, before)
    return machine_out(db, row)


def delete_machine(db: Session, principal: Principal, name: str) -> MachineOut:
    """Marks the machine for removal: the worker deletes its BareMetalHost (Metal3 detaches
    it), waits for it to be gone, removes its secrets, then the machine."""
    ensure_platform_writer(principal)
    row = _machine(db, name, lock=True)
    if row.deleting_at is None:
        _refuse_while_private(row)
        if row.desired != "pool" or row.phase not in DELETABLE_PHASES:
            raise Conflict(f"machine {row.name} is {row.phase}: release it and wait until it "
                           "is back in the pool (available) before deleting it")
        before = _details(row)
        row.deleting_at = utcnow()
        _changed(db, principal, "machine.delete", row, before)
    return machine_out(db, row)


def replace_bmc_credentials(db: Session, principal: Principal, settings: Settings, name: str,
                            payload: BmcCredentialsIn) -> MachineOut:
    ensure_platform_writer(principal)
    row = _machine(db, name, lock=True)
    _refuse_while_deleting(row)
    before = _details(row)
    row.bmc_credentials_encrypted = _sealed(settings, payload)
    row.bmc_credentials_set_at = utcnow()
    _changed(db, principal, "machine.bmc_credentials_replace", row, before)
    return machine_out(db, row)


def _host(db: Session, name: str) -> HostCluster:
    host = hosts_repository.host_by_name(db, name)
    if host is None:
        raise ValidationFailed.on_field("host_cluster", f"there is no host cluster {name!r}")
    return host


def _refuse_while_deleting(row: Machine) -> None:
    if row.deleting_at is not None:
        raise Conflict(f"machine {row.name} is being deleted")


def _sealed(settings: Settings, credentials: BmcCredentialsIn) -> str:
    plain = json.dumps({"username": credentials.username, "password": credentials.password})
    return SecretBox.from_settings(settings).seal(plain)


def _changed(db: Session, principal: Principal, action: str, row: Machine,
             before: dict[str, Any] | None) -> None:
    """A change of what is asked of the machine: a new generation, audited, and the worker
    looks at it now."""
    if before is not None:
        row.generation += 1
    row.updated_at = utcnow()
    db.flush()
    enqueue(db, MACHINES, row.id)
    audit.record(db, action=action, actor_id=principal.user_id, actor_label=principal.label,
                 target_type=TARGET_TYPE, target_id=row.id, target_label=f"machine {row.name}",
                 before=before, after=_details(row))


def _details(row: Machine) -> dict[str, Any]:
    """What the audit trail keeps of a machine: never its BMC credentials."""
    return {"name": row.name, "host_cluster_id": row.host_cluster_id,
            "bmc_address": row.bmc_address, "boot_mac": row.boot_mac,
            "gpu_class_id": row.gpu_class_id, "gpu_count": row.gpu_count, "rack": row.rack,
            "desired": row.desired, "deleting": row.deleting_at is not None,
            "cluster_id": row.cluster_id,
            "bmc_credentials_set_at": row.bmc_credentials_set_at.isoformat()
            if row.bmc_credentials_set_at else None}


# ----- private-nodes clusters: the cluster kind gives and takes back whole machines


def assign_to_cluster(db: Session, machine_id: int, cluster_id: int, tenant_id: int,
                      cluster_label: str, actor: str) -> Machine | None:
    """Gives a free machine to the cluster (``repository.assign``: never to two); audited as
    ``machine.assigned`` and the machines kind told. None when it was not free any more."""
    if not repository.assign(db, machine_id, cluster_id, utcnow()):
        return None
    row = db.scalar(select(Machine).where(Machine.id == machine_id)
                    .execution_options(populate_existing=True))
    assert row is not None
    enqueue(db, MACHINES, row.id)
    audit.record(db, action="machine.assigned", actor_id=None, actor_label=actor,
                 tenant_id=tenant_id, target_type=TARGET_TYPE, target_id=row.id,
                 target_label=f"machine {row.name}", before={"desired": "pool", "cluster": None},
                 after={"desired": "private", "cluster": cluster_label,
                        "gpu_count": row.gpu_count})
    return row


def release_from_cluster(db: Session, row: Machine, tenant_id: int | None, cluster_label: str,
                         actor: str, why: str) -> bool:
    """The cluster gives the (locked) machine back: drained, removed from the cluster and
    deprovisioned by the machines kind, which clears its cluster once it is available again.
    Audited as ``machine.released``; False if it was on its way back already."""
    if row.desired != "private":
        return False
    row.desired = "pool"
    row.generation += 1
    row.updated_at = utcnow()
    db.flush()
    enqueue(db, MACHINES, row.id)
    audit.record(db, action="machine.released", actor_id=None, actor_label=actor,
                 tenant_id=tenant_id, target_type=TARGET_TYPE, target_id=row.id,
                 target_label=f"machine {row.name}",
                 before={"desired": "private", "cluster": cluster_label},
                 after={"desired": "pool", "cluster": cluster_label, "why": why})
    return True


def record_returned(db: Session, row: Machine, tenant_id: int | None,
                    cluster_label: str) -> bool:
    """The machine is available again, wiped: no cluster's any more (``machine.returned``)."""
    if not repository.clear_cluster(db, row.id, utcnow()):
        return False
    db.refresh(row)
    audit.record(db, action="machine.returned", actor_id=None, actor_label=WORKER,
                 tenant_id=tenant_id, target_type=TARGET_TYPE, target_id=row.id,
                 target_label=f"machine {row.name}", before={"cluster": cluster_label},
                 after={"cluster": None, "phase": row.phase})
    return True


# ----- the worker's part


@dataclass(frozen=True)
class BmcCredentials:
    username: str = field(repr=False)
    password: str = field(repr=False)


@dataclass(frozen=True)
class MachineSpec:
    """What the worker needs of a machine for one reconcile."""

    id: int
    name: str
    host_cluster_id: int
    bmc_address: str
    boot_mac: str
    desired: str
    deleting: bool
    generation: int
    node_name: str | None
    bootstrap_token_id: str | None
    bootstrap_token_expires_at: datetime | None
    bmc: BmcCredentials = field(repr=False)
    # The private-nodes cluster it serves (or is going back to the pool from).
    cluster_id: int | None = None
    gpu_count: int = 0


def spec_of(row: Machine, settings: Settings) -> MachineSpec:
    opened = json.loads(SecretBox.from_settings(settings).open(row.bmc_credentials_encrypted))
    return MachineSpec(
        id=row.id, name=row.name, host_cluster_id=row.host_cluster_id,
        bmc_address=row.bmc_address, boot_mac=row.boot_mac, desired=row.desired,
        deleting=row.deleting_at is not None, generation=row.generation,
        node_name=row.node_name, bootstrap_token_id=row.bootstrap_token_id,
        bootstrap_token_expires_at=row.bootstrap_token_expires_at,
        bmc=BmcCredentials(str(opened.get("username", "")), str(opened.get("password", ""))),
        cluster_id=row.cluster_id, gpu_count=row.gpu_count)


def record_token(row: Machine, token_id: str | None, expires_at: datetime | None) -> None:
    row.bootstrap_token_id, row.bootstrap_token_expires_at = token_id, expires_at


def record_observation(db: Session, row: Machine, observed: Observed, generation: int,
                       now: datetime) -> bool:
    """What the worker read becomes the machine's phase, reason and conditions, as of the
    generation it acted on; a new phase is audited. True when the machine newly joined."""
    gpu_class = db.get(GpuClass, row.gpu_class_id)
    expected = (gpu_class.product, row.gpu_count) if gpu_class else None
    found = reading(observed, row.desired, row.deleting_at is not None, expected)
    conditions = conditions_of(list(row.conditions or []), observed, generation, now)
    before = {"phase": row.phase, "reason": row.reason, "node_name": row.node_name}
    joined = found.phase == "joined" and row.phase != "joined"
    row.provisioning_state = (observed.state or "")[:40]
    row.reason = found.reason[:1000]
    row.node_name = observed.node_name or (
        row.node_name if row.desired in JOINING else None)
    if conditions != row.conditions:
        row.conditions = conditions
    row.observed_generation = max(row.observed_generation, generation)
    if found.phase != row.phase:
        row.phase = found.phase
        audit.record(db, action=f"machine.{found.phase}", actor_id=None, actor_label=WORKER,
                     target_type=TARGET_TYPE, target_id=row.id,
                     target_label=f"machine {row.name}", before=before,
                     after={"phase": row.phase, "reason": row.reason,
                            "node_name": row.node_name})
    if joined and row.desired == "provisioned":
        enqueue(db, NODES, row.host_cluster_id)  # the inventory takes the new node now
    return joined


def record_blocked(row: Machine, reason: str, message: str, generation: int,
                   now: datetime) -> None:
    """What stops the worker becomes the machine's reason and its ``Reconciled`` condition;
    the phase stays what Metal3 said last."""
    row.reason = message[:1000]
    row.conditions = blocked(list(row.conditions or []), reason, message, generation, now)


def forget(db: Session, row: Machine) -> None:
    """The BareMetalHost and secrets are gone: the machine leaves the portal."""
    before = _details(row)
    db.delete(row)
    db.flush()
    audit.record(db, action="machine.deleted", actor_id=None, actor_label=WORKER,
                 target_type=TARGET_TYPE, target_id=row.id, target_label=f"machine {row.name}",
                 before=before, after=None)
