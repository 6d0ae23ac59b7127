"""Read models of the tables the accounting sums: quotas, dedicated nodes, clusters and the
bare-metal machines of private-nodes clusters.

The accounting sits below every domain whose rows it counts (GPU classes, quotas, nodes,
clusters), so it reads their tables through these column lists, never their models; only the
columns read are listed, and ``tests/test_read_models.py`` checks each against its table.
"""

from __future__ import annotations

from sqlalchemy import Integer, String, column, table

from app.database.core import UTCDateTime

tenant_quotas = table(
    "tenant_quotas",
    column("id", Integer), column("tenant_id", Integer), column("gpu_class_id", Integer),
    column("region", String), column("gpus", Integer), column("unit", String),
    column("mig_profile", String), column("amount", Integer),
)

nodes = table(
    "nodes",
    column("id", Integer), column("name", String), column("host_cluster_id", Integer),
    column("gpu_class_id", Integer), column("gpu_count", Integer), column("gone_at", UTCDateTime),
)

node_assignments = table(
    "node_assignments",
    column("node_id", Integer), column("tenant_id", Integer), column("ended_at", UTCDateTime),
)

virtual_clusters = table(
    "virtual_clusters",
    column("id", Integer), column("name", String), column("tenant_id", Integer),
    column("gpu_class_id", Integer), column("host_cluster_id", Integer),
    column("placement", String), column("gpus", Integer), column("unit", String),
    column("mig_profile", String), column("amount", Integer),
)

# Bare-metal machines, for the private-nodes pool: which are free, which serve which cluster.
machines = table(
    "machines",
    column("id", Integer), column("name", String), column("host_cluster_id", Integer),
    column("gpu_class_id", Integer), column("gpu_count", Integer), column("cluster_id", Integer),
    column("desired", String), column("phase", String), column("deleting_at", UTCDateTime),
    column("node_name", String),
)
