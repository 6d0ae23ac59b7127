"""Read models of the tables above GPU classes whose figures a class's capacity sums.

GPU classes are below nodes and clusters (a node and a cluster are each of a class), so the
capacity queries read those domains' tables through these column lists, never
through their models. Only the columns read are listed; ``tests/test_read_models.py`` checks
each against the table its domain maps.
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Double, Integer, String, column, table

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

virtual_clusters = table(
    "virtual_clusters",
    column("host_cluster_id", Integer), column("gpu_class_id", Integer),
    column("placement", String), column("gpus", Integer), column("unit", String),
    column("mig_profile", String), column("amount", Integer),
)

gpus_in_use = table(
    "quota_gpus_in_use",
    column("host_cluster_id", Integer), column("gpu_class_id", Integer), column("gpus", Double),
    column("burst_gpus", Double), column("unit", String), column("mig_profile", String),
)
