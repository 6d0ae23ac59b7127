"""A lower domain reads a higher one's table through a read model (docs/layout.md): each of
its columns must be one the table's own model maps, of the same kind."""

from __future__ import annotations

import pytest
from sqlalchemy import TableClause

import app.process.all_models  # noqa: F401 - every table on the metadata
from app.accounting import read_models as accounting_reads
from app.audit import repository as audit_repository
from app.auth import repository as auth_repository
from app.database.core import Base
from app.gpu_classes import read_models as gpu_class_reads

READ_MODELS = [audit_repository.tenants, auth_repository.memberships, gpu_class_reads.nodes,
               gpu_class_reads.node_assignments, gpu_class_reads.virtual_clusters,
               gpu_class_reads.gpus_in_use, accounting_reads.tenant_quotas,
               accounting_reads.nodes, accounting_reads.node_assignments,
               accounting_reads.virtual_clusters]


@pytest.mark.parametrize("read_model", READ_MODELS, ids=lambda table: table.name)
def test_every_column_of_a_read_model_is_mapped_alike(read_model: TableClause) -> None:
    mapped = Base.metadata.tables[read_model.name]
    for column in read_model.columns:
        assert column.name in mapped.columns, f"{read_model.name}.{column.name} is not mapped"
        assert type(column.type) is type(mapped.columns[column.name].type), (
            f"{read_model.name}.{column.name}")
