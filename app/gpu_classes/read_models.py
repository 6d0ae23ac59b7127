"""Read models of the tables above GPU classes whose figures a class's capacity sums.

GPU classes are below quotas and nodes (a quota and a node are each of a class), so the
capacity queries read those domains' tables through these column lists, never through their
models. Only the columns read are listed; ``tests/test_read_models.py`` checks each against the
table its domain maps.
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Integer, String, column, table

from app.database.core import UTCDateTime

nodes = table(
    "nodes",
    column("id", Integer), column("host_cluster_id", Integer), column("gpu_class_id", Integer),
    column("gpu_count", Integer), column("ready", Boolean), column("mig_strategy", String),
    column("mig_resources", JSON), column("gone_at", UTCDateTime),
)

node_assignments = table(
    "node_assignments",
    column("id", Integer), column("node_id", Integer), column("tenant_id", Integer),
    column("ended_at", UTCDateTime),
)

tenant_quotas = table(
    "tenant_quotas",
    column("tenant_id", Integer), column("gpu_class_id", Integer), column("region", String),
    column("gpus", Integer),
)
