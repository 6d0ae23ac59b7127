"""Connects the cascades between domains (app.kit.hooks) in every process that changes data.

The web app, the worker and the CLI call ``connect_hooks`` at start; the required hooks
refuse to fire unconnected, so a process that forgot fails loudly instead of skipping a
revocation.
"""

from __future__ import annotations


def connect_hooks() -> None:
    # Imported for the listeners they connect.
    import app.clusters.quota_cascades
    import app.kubeconfigs.cascades
    import app.notifications.emit
    import app.reconcilers.watches
    import app.tenants.group_mappings  # noqa: F401
