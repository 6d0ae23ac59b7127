"""What a caller is shown of a cluster: ``ClusterOut``'s fields as plain values, from a cluster
or from a row of its columns (a listed page), with what the worker last saw of its GPU pods
waiting and of the GPUs its queue holds."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.clusters import conditions as cond
from app.clusters import sleep_policy
from app.clusters.schemas import ConditionOut, GpusInUseOut, GpuWaitOut
from app.kit.gpu_units import GrantUnit, share_text, words


def gpu_wait(pods: int | None, reason: str, observed_at: datetime | None) -> GpuWaitOut | None:
    """``None`` when the worker has not looked (no row, or the columns of an outer join)."""
    if pods is None or observed_at is None:
        return None
    return GpuWaitOut(pods=pods, reason=reason, observed_at=observed_at,
                      message=gpu_wait_message(pods, reason))


def gpus_in_use(guaranteed: float | None, burst: float | None,
                observed_at: datetime | None) -> GpusInUseOut | None:
    """``None`` when the worker has not read the cluster's queue (no row, or an outer join's
    columns)."""
    if guaranteed is None or burst is None or observed_at is None:
        return None
    return GpusInUseOut(guaranteed=guaranteed, burst=burst, reclaimable=burst > 0,
                        observed_at=observed_at)


def gpu_wait_message(pods: int, reason: str) -> str:
    if pods == 0:
        return "no pod waits for GPUs"
    said = f"{pods} pod waits" if pods == 1 else f"{pods} pods wait"
    return f"{said} for GPUs: {reason}" if reason else f"{said} for GPUs (KAI has not said why yet)"


_CONDITION_FIELDS = tuple(ConditionOut.model_fields)


def cluster_fields(cluster: Any, tenant: str, gpu_class: tuple[str | None, str | None],
                   host: str, region: str, wait: GpuWaitOut | None,
                   in_use: GpusInUseOut | None) -> dict[str, Any]:
    """``ClusterOut``'s fields, from a cluster or a row of its columns, as plain values;
    ``gpu_class`` is its product and display name. The host's name and region, never how the
    portal reaches it."""
    conditions = list(cluster.conditions or [])
    deleting = cluster.deletion_requested_at is not None
    status = cond.statuses(conditions)
    return {
        "id": cluster.id, "tenant": tenant, "name": cluster.name,
        "kubernetes_version": cluster.kubernetes_version, "placement": cluster.placement,
        "gpu_class_id": cluster.gpu_class_id, "gpu_class": gpu_class[0],
        "gpu_class_name": gpu_class[1],
        "gpus": cluster.gpus, "cpu_millicores": cluster.cpu_millicores,
        "memory_mib": cluster.memory_mib, "template_version_id": cluster.template_version_id,
        "pod_security": cluster.pod_security, "user_namespaces": cluster.user_namespaces,
        "generation": cluster.generation,
        "observed_generation": cluster.observed_generation,
        "phase": cond.phase_of(status, deleting, cluster.power),
        "ready": status.get(cond.READY) == "True",
        "over_quota": cluster.over_quota, "deleting": deleting, "endpoint": cluster.endpoint,
        "region": region, "host_cluster": host, "placement_reason": cluster.placement_reason,
        "conditions": [{field: c[field] for field in _CONDITION_FIELDS} for c in conditions],
        "waiting_for_gpus": wait.model_dump() if wait else None,
        "gpus_in_use": in_use.model_dump() if in_use else None,
        "power": {"wanted": cluster.power, "reason": cluster.power_reason,
                  "changed_at": cluster.power_changed_at, "asleep_since": cluster.asleep_since},
        "sleep_policy": {**{name: getattr(cluster, name) for name in SLEEP_POLICY_FIELDS},
                         "deletes_at": sleep_policy.deletes_at(cluster)},
        "private_nodes": [],  # a private-nodes cluster's, filled in by the service
        "created_at": cluster.created_at, "updated_at": cluster.updated_at,
        **unit_fields(cluster, gpu_class[1]),
    }


def unit_fields(cluster: Any, class_name: str | None) -> dict[str, Any]:
    """What the cluster holds in its unit (``app.kit.gpu_units``), and in words."""
    unit = GrantUnit(getattr(cluster, "unit", None) or "gpu",
                     getattr(cluster, "mig_profile", None) or "")
    amount = getattr(cluster, "amount", None)
    amount = cluster.gpus if amount is None else int(amount)
    return {"unit": unit.kind, "mig_profile": unit.profile, "amount": amount,
            "slices": amount if unit.kind == "mig" else None,
            "gpu_share": share_text(amount) if unit.kind == "share" else None,
            "grant": words(unit, amount, class_name) if class_name and amount else ""}


SLEEP_POLICY_FIELDS = ("never_sleep", "sleep_after_idle_minutes", "idle_measure",
                       "sleep_schedule", "sleep_timezone", "delete_after_sleep_days",
                       "deletion_warned_at")
