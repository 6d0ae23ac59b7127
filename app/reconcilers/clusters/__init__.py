"""The virtual cluster reconciler, one kind of the runtime (see ``kind.py``)."""

from app.reconcilers.clusters.kind import ClusterReconciler

__all__ = ["ClusterReconciler"]
