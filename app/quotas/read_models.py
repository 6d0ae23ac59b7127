"""Read models of the tables above quotas that the quota views sum.

Quotas are below nodes and clusters (a dedicated node and a cluster each count against a
quota), so the GPUs a tenant's clusters hold are read from the clusters domain's table through
this column list, never its model; its nodes through ``app.gpu_classes.read_models``.
``tests/test_read_models.py`` checks each column against the table its domain maps.
"""

from __future__ import annotations

from sqlalchemy import Integer, String, column, table

virtual_clusters = table(
    "virtual_clusters",
    column("id", Integer), column("tenant_id", Integer), column("gpu_class_id", Integer),
    column("host_cluster_id", Integer), column("placement", String), column("gpus", Integer),
)
