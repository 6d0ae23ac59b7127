"""Every column holding SecretBox ciphertext, read in id order and rewritten compare-and-set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import literal, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.clusters.models import VirtualCluster
from app.hosts.models import HostCluster
from app.machines.models import Machine
from app.notifications.models import WebhookEndpoint


@dataclass(frozen=True)
class SealedColumn:
    target_type: str  # as the audit trail names the row's kind
    model: Any
    column: InstrumentedAttribute[str | None]
    tenant_id: Any  # a column, or NULL for rows no tenant owns


SEALED_COLUMNS = (
    SealedColumn("virtual_cluster", VirtualCluster, VirtualCluster.admin_kubeconfig_encrypted,
                 VirtualCluster.tenant_id),
    SealedColumn("host_cluster", HostCluster, HostCluster.credentials_encrypted,
                 literal(None)),
    SealedColumn("machine", Machine, Machine.bmc_credentials_encrypted,
                 literal(None)),
    # A webhook's signing secret, and its predecessor while a roll overlaps.
    SealedColumn("webhook_endpoint", WebhookEndpoint,
                 cast("InstrumentedAttribute[str | None]", WebhookEndpoint.secret_sealed),
                 WebhookEndpoint.tenant_id),
    SealedColumn("webhook_endpoint", WebhookEndpoint, WebhookEndpoint.previous_secret_sealed,
                 WebhookEndpoint.tenant_id),
)


@dataclass(frozen=True)
class SealedRow:
    id: int
    tenant_id: int | None
    sealed: str


def sealed_batch(db: Session, spec: SealedColumn, after_id: int, limit: int) -> list[SealedRow]:
    # Every tenant's rows on purpose: an operator command re-encrypting the whole database.
    query = (select(spec.model.id, spec.tenant_id, spec.column)
             .where(spec.column.is_not(None), spec.model.id > after_id)
             .order_by(spec.model.id).limit(limit))
    return [SealedRow(id=row[0], tenant_id=row[1], sealed=row[2]) for row in db.execute(query)]


def replace_sealed(db: Session, spec: SealedColumn, row: SealedRow, resealed: str) -> bool:
    """False when the row changed since it was read (a worker stored a fresh credential)."""
    result = db.execute(
        update(spec.model)
        .where(spec.model.id == row.id, spec.column == row.sealed)
        .values({spec.column.key: resealed})
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)
