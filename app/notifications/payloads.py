"""What a notification of each kind says: an allowlist of fields taken from the audit event
(names, numbers, times) and a page path, never a copy of the event's before or after, so no
secret can ride along. The time-based kinds (the worker's scan) name their fields one by one
from the rows they are about."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import readable
from app.audit.events import Recorded
from app.clusters.models import VirtualCluster
from app.hosts.models import HostCluster
from app.machines.models import Machine
from app.notifications.models import WebhookEndpoint
from app.tenants import repository as tenants

NOTE_MAX = 500  # a decision's note, as its author wrote it
Payload = dict[str, Any]


def _picked(after: dict[str, Any] | None, *names: str) -> Payload:
    after = after or {}
    return {name: after.get(name) for name in names}


def _slug(db: Session, tenant_id: int | None) -> str:
    if tenant_id is None:
        return ""
    return tenants.slugs_of(db, [tenant_id]).get(tenant_id, "")


def _number(value: str) -> int | None:
    return int(value) if value.isdigit() else None


def quota_requested(db: Session, event: Recorded) -> Payload:
    return {"tenant": _slug(db, event.tenant_id), "request": event.target_label,
            "request_id": _number(event.target_id),
            **_picked(event.after, "gpus", "gpu_class", "region", "ends_at"),
            "path": "/admin/quota-requests"}


def quota_decided(db: Session, event: Recorded) -> Payload:
    slug = _slug(db, event.tenant_id)
    after = event.after or {}
    return {"tenant": slug, "request": event.target_label,
            "request_id": _number(event.target_id), "decision": after.get("state"),
            **_picked(after, "gpus", "approved_gpus"),
            "note": str(after.get("note") or "")[:NOTE_MAX], "path": f"/t/{quote(slug)}"}


def quota_changed(db: Session, event: Recorded) -> Payload:
    slug = _slug(db, event.tenant_id)
    return {"tenant": slug, "quota": event.target_label, "change": "changed",
            **_picked(event.after, "gpu_class", "region", "gpus"), "path": f"/t/{quote(slug)}"}


def quota_expired(db: Session, event: Recorded) -> Payload:
    slug = _slug(db, event.tenant_id)
    after = event.after or {}
    return {"tenant": slug, "request": event.target_label, "change": "expired",
            "returned_gpus": after.get("approved_gpus"), "path": f"/t/{quote(slug)}"}


def _cluster(db: Session, event: Recorded) -> tuple[str, Payload]:
    """The cluster's tenant and name, and its page."""
    slug = _slug(db, event.tenant_id)
    cluster_id = _number(event.target_id)
    name = db.scalar(select(VirtualCluster.name).where(
        VirtualCluster.id == cluster_id, VirtualCluster.tenant_id == event.tenant_id)) or ""
    return slug, {"tenant": slug, "cluster": name, "cluster_id": cluster_id,
                  "path": f"/t/{quote(slug)}/clusters/{quote(name)}"}


def cluster(db: Session, event: Recorded) -> Payload:
    return _cluster(db, event)[1]


def cluster_failed(db: Session, event: Recorded) -> Payload:
    # The reason's word only: the message, on the cluster's page, may quote a host's answer.
    return {**cluster(db, event), **_picked(event.after, "reason")}


def cluster_power(db: Session, event: Recorded) -> Payload:
    return {**cluster(db, event), **_picked(event.after, "reason")}


def cluster_deletion_announced(db: Session, event: Recorded) -> Payload:
    return {**cluster(db, event), **_picked(event.after, "deletes_at", "asleep_since")}


def cluster_deleted(db: Session, event: Recorded) -> Payload:
    slug, payload = _cluster(db, event)
    return {**payload, "path": f"/t/{quote(slug)}/clusters"}


def gpus_reclaimed(db: Session, event: Recorded) -> Payload:
    """The first of a window's items; the digest appends the others (``emit``)."""
    slug, payload = _cluster(db, event)
    return {"tenant": slug, "items": [reclaimed_item(payload["cluster"], event)],
            "count": 1, "path": f"/t/{quote(slug)}/clusters"}


def reclaimed_item(cluster_name: str, event: Recorded) -> Payload:
    return {"cluster": cluster_name, **_picked(event.after, "pod", "at")}


def host_unreachable(db: Session, event: Recorded) -> Payload:
    name = db.scalar(select(HostCluster.name).where(
        HostCluster.id == _number(event.target_id))) or ""
    return {"host": name, "path": f"/admin/hosts/{quote(name)}"}


def machine_failed(db: Session, event: Recorded) -> Payload:
    name = db.scalar(select(Machine.name).where(Machine.id == _number(event.target_id))) or ""
    return {"machine": name, "path": f"/admin/machines/{quote(name)}"}


def template_validation_failed(db: Session, event: Recorded) -> Payload:
    return {"template": event.target_id, **_picked(event.after, "version"),
            "path": f"/admin/cluster-templates/{quote(event.target_id)}"}


def endpoint_failing(db: Session, event: Recorded) -> Payload:
    row = db.execute(select(WebhookEndpoint.name, WebhookEndpoint.failing_since).where(
        WebhookEndpoint.id == _number(event.target_id))).one_or_none()
    slug = _slug(db, event.tenant_id)
    failing_since = row.failing_since.isoformat() if row and row.failing_since else None
    return {"endpoint": row.name if row else "", "tenant": slug,
            "failing_since": failing_since, **_picked(event.after, "last_error"),
            "path": f"/t/{quote(slug)}/webhooks" if slug else "/admin/webhooks"}


# ----- the time-based kinds, found by the worker's scan (app/notifications/scan.py)


def _iso(moment: datetime) -> str:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def _cluster_path(tenant: str, cluster_name: str) -> str:
    return f"/t/{quote(tenant)}/clusters/{quote(cluster_name)}"


def quota_expiring(*, tenant: str, request_id: int, gpu_class: str, gpus: int, region: str,
                   ends_at: datetime) -> Payload:
    return {"tenant": tenant, "request": readable.quota_request_label(gpu_class, request_id,
                                                                      tenant),
            "request_id": request_id, "gpus": gpus, "gpu_class": gpu_class,
            "region": region or None, "ends_at": _iso(ends_at), "path": f"/t/{quote(tenant)}"}


def cluster_stuck(*, tenant: str, cluster_id: int, cluster_name: str, generation: int,
                  since: datetime, minutes: int, limit_minutes: int, step: str) -> Payload:
    return {"tenant": tenant, "cluster": cluster_name, "cluster_id": cluster_id,
            "generation": generation, "provisioning_since": _iso(since), "minutes": minutes,
            "limit_minutes": limit_minutes, "step": step[:100],
            "path": _cluster_path(tenant, cluster_name)}


def kubeconfig_expiring(*, tenant: str, cluster_name: str, grant_id: int, role: str,
                        expires_at: datetime) -> Payload:
    # The grant's role and end only: never its service account's token or the kubeconfig.
    return {"tenant": tenant, "cluster": cluster_name, "grant_id": grant_id, "role": role,
            "expires_at": _iso(expires_at), "path": _cluster_path(tenant, cluster_name)}


DEDICATED_NODES = "dedicated nodes (no cluster)"


def gpus_idle(*, tenant: str, day: date, idle: Mapping[str | None, int],
              threshold_percent: float, window_minutes: int, observed_at: datetime) -> Payload:
    """``idle``: idle GPUs per cluster name (None: the tenant's dedicated nodes, no cluster's
    pod on them)."""
    items = [{"cluster": cluster if cluster is not None else DEDICATED_NODES, "gpus": gpus}
             for cluster, gpus in sorted(idle.items(), key=lambda i: (i[0] is None, i[0] or ""))]
    return {"tenant": tenant, "date": day.isoformat(), "gpus": sum(idle.values()),
            "threshold_percent": int(threshold_percent) if threshold_percent.is_integer()
            else threshold_percent, "window_minutes": window_minutes,
            "observed_at": _iso(observed_at), "items": items, "path": f"/t/{quote(tenant)}/usage"}
