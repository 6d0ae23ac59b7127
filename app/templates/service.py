"""Cluster templates: platform admins version, validate, offer and retire them; tenants create
clusters from offered versions and upgrade clusters to newer ones.

A version's settings never change once written: an edit is a new version (a draft). Only its
validation result and its state move: draft -> offered (after validation passed) -> retired.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.authz import ensure_platform_writer
from app.clusters import service as clusters
from app.clusters.schemas import ClusterOut
from app.clusters.shapes import TemplateUpgrade
from app.database.concurrency import insert_or_conflict
from app.database.core import utcnow
from app.gpu_classes.models import GpuClass
from app.kit.config import Settings
from app.kit.errors import Conflict, NotFound, ValidationFailed
from app.kit.validation_messages import in_our_words
from app.kube.port import HostProbe
from app.templates import repository
from app.templates.addons import cluster_addons
from app.templates.charts import ChartResolver
from app.templates.models import DEFAULT_TEMPLATE, ClusterTemplate, ClusterTemplateVersion
from app.templates.schemas import (
    TemplateCreate,
    TemplateOut,
    VersionEdit,
    VersionOut,
    VersionSettings,
)
from app.templates.validation import validate
from app.workqueue import TEMPLATE_VALIDATION, enqueue

SETTING_FIELDS = tuple(VersionSettings.model_fields)


# ----- reading


def settings_of(row: ClusterTemplateVersion) -> VersionSettings:
    return VersionSettings.model_validate({name: getattr(row, name) for name in SETTING_FIELDS})


def version_out(db: Session, row: ClusterTemplateVersion) -> VersionOut:
    gpu_class = db.get(GpuClass, row.gpu_class_id) if row.gpu_class_id else None
    return VersionOut.model_validate({
        **settings_of(row).model_dump(), "version": row.version, "state": row.state,
        "gpu_class": gpu_class.product if gpu_class else None, "validation": row.validation,
        "validation_pending": row.validation_requested_at is not None,
        "validation_requested_at": row.validation_requested_at,
        "validated_at": row.validated_at, "offered_at": row.offered_at,
        "retired_at": row.retired_at, "created_at": row.created_at,
    })


def _template_out(db: Session, template: ClusterTemplate,
                  rows: Sequence[ClusterTemplateVersion], everything: bool) -> TemplateOut:
    shown = [r for r in rows if everything or r.state == "offered"]
    offered = [r.version for r in rows if r.state == "offered"]
    return TemplateOut(name=template.name, description=template.description,
                       latest_offered=max(offered) if offered else None,
                       versions=[version_out(db, r) for r in shown])


def list_templates(db: Session, principal: Principal) -> list[TemplateOut]:
    """Platform admins see every template and version; everyone else the offered ones."""
    templates = repository.templates(db)
    rows = repository.versions(db, [t.id for t in templates])
    by_template: dict[int, list[ClusterTemplateVersion]] = {}
    for row in rows:
        by_template.setdefault(row.template_id, []).append(row)
    outs = [_template_out(db, t, by_template.get(t.id, []), principal.is_platform_admin)
            for t in templates]
    return [o for o in outs if o.versions or principal.is_platform_admin]


def template_for(db: Session, principal: Principal, name: str) -> ClusterTemplate:
    template = repository.template_by_name(db, name)
    if template is None or (not principal.is_platform_admin
                            and repository.newest_offered(db, template.id) is None):
        raise NotFound(f"no cluster template {name!r}")
    return template


def get_template(db: Session, principal: Principal, name: str) -> TemplateOut:
    template = template_for(db, principal, name)
    return _template_out(db, template, repository.versions(db, [template.id]),
                         principal.is_platform_admin)


def _version_row(db: Session, template: ClusterTemplate, number: int) -> ClusterTemplateVersion:
    row = repository.version(db, template.id, number)
    if row is None:
        raise NotFound(f"cluster template {template.name!r} has no version {number}")
    return row


# ----- writing (platform admins)


def create_template(db: Session, principal: Principal, payload: TemplateCreate) -> TemplateOut:
    ensure_platform_writer(principal)
    _check_gpu_class(db, payload.settings)
    template = ClusterTemplate(name=payload.name, description=payload.description,
                               created_by_id=principal.user_id)
    insert_or_conflict(db, template, Conflict(
        f"there is a cluster template named {payload.name!r} already",
        errors=[{"field": "name", "message": "this name is taken"}]))
    row = _add_version(db, principal, template, 1, payload.settings)
    _record(db, principal, "cluster_template.create", template, None,
            {"description": template.description, **_audited(row)})
    return get_template(db, principal, template.name)


def new_version(db: Session, principal: Principal, name: str, edit: VersionEdit) -> VersionOut:
    """The newest version's settings with the given fields replaced, as a new draft."""
    ensure_platform_writer(principal)
    found = template_for(db, principal, name)
    template = repository.lock_template(db, found.id)
    assert template is not None
    newest = repository.newest_version(db, template.id)
    base = settings_of(newest).model_dump() if newest else {}
    settings = _merged(base, edit.model_dump(include=edit.model_fields_set))
    _check_gpu_class(db, settings)
    row = _add_version(db, principal, template, (newest.version if newest else 0) + 1, settings)
    _record(db, principal, "cluster_template.new_version", template, None, _audited(row))
    return version_out(db, row)


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> VersionSettings:
    """The edit on top of the newest version, checked as a whole (an edit of ``max_gpus`` alone
    can fall below the copied ``default_gpus``)."""
    try:
        return VersionSettings.model_validate({**base, **changes})
    except ValidationError as error:
        problems = [{"field": ".".join(str(p) for p in e["loc"]) or "settings",
                     "message": in_our_words(e)}
                    for e in error.errors()]
        raise ValidationFailed("; ".join(p["message"] for p in problems),
                               errors=problems) from error


def _check_gpu_class(db: Session, settings: VersionSettings) -> None:
    if settings.gpu_class_id is not None and db.get(GpuClass, settings.gpu_class_id) is None:
        raise Conflict(f"there is no GPU class {settings.gpu_class_id}",
                       errors=[{"field": "gpu_class_id", "message": "no such GPU class"}])


def _add_version(db: Session, principal: Principal, template: ClusterTemplate, number: int,
                 settings: VersionSettings) -> ClusterTemplateVersion:
    values = settings.model_dump()
    row = ClusterTemplateVersion(template_id=template.id, version=number, state="draft",
                                 created_by_id=principal.user_id, validation=None, **values)
    db.add(row)
    db.flush()
    return row


def request_validation(db: Session, principal: Principal, name: str,
                       number: int) -> VersionOut:
    """Queues the version's validation for the worker, which holds the host cluster rights the
    dry-runs need (the web process has none); the page shows it pending until the result."""
    ensure_platform_writer(principal)
    template = template_for(db, principal, name)
    row = _version_row(db, template, number)
    if row.state == "retired":
        raise Conflict(f"{name} v{number} is retired")
    if row.validation_requested_at is None:
        row.validation_requested_at = utcnow()
        db.flush()
        enqueue(db, TEMPLATE_VALIDATION, row.id)
        _record(db, principal, "cluster_template.validation_requested", template, None,
                {"version": number})
    return version_out(db, row)


def run_validation(settings: VersionSettings, gpu_product: str | None, portal: Settings,
                   hosts: Mapping[str, HostProbe | None], charts: ChartResolver
                   ) -> dict[str, Any]:
    """Every check, in the worker. A check that crashes fails the validation with its reason
    rather than leaving the version pending for ever."""
    try:
        return validate(settings, gpu_product, portal, hosts, charts)
    except Exception as error:  # whatever it is, the admin reads it as the reason
        return {"passed": False, "checks": [
            {"name": "validation", "passed": False,
             "reasons": [f"the validation stopped: {type(error).__name__}: {error}"]}]}


def store_validation(db: Session, row: ClusterTemplateVersion, requested_at: datetime,
                     result: dict[str, Any], actor: str) -> None:
    """The worker's result; a version asked for again meanwhile stays pending (and runs again)."""
    row.validation, row.validated_at = result, utcnow()
    if row.validation_requested_at == requested_at:
        row.validation_requested_at = None
    db.flush()
    template = db.get(ClusterTemplate, row.template_id)
    assert template is not None
    audit.record(db, action="cluster_template.validate", actor_id=None, actor_label=actor,
                 target_type="cluster_template", target_id=template.name, before=None,
                 after={"version": row.version, "passed": result["passed"]})


def failed_reasons(validation: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not validation:
        return [{"field": "validation", "message": "the version has not been validated"}]
    return [{"field": check["name"], "message": reason}
            for check in validation.get("checks", []) if not check.get("passed")
            for reason in check.get("reasons", [])]


def offer_version(db: Session, principal: Principal, name: str, number: int) -> VersionOut:
    ensure_platform_writer(principal)
    # Locked, as a retirement is: of two offers at once, the second finds it offered.
    template = repository.lock_template(db, template_for(db, principal, name).id)
    assert template is not None
    row = _version_row(db, template, number)
    if row.state != "draft":
        raise Conflict(f"{name} v{number} is {row.state}; only a draft can be offered")
    if row.validation_requested_at is not None:
        raise Conflict(f"{name} v{number} is being validated; offer it once the result is in",
                       errors=[{"field": "validation", "message": "the validation is pending"}])
    if not (row.validation or {}).get("passed"):
        raise Conflict(f"{name} v{number} has not passed validation; validate it and fix "
                       "what fails", errors=failed_reasons(row.validation))
    row.state, row.offered_at = "offered", utcnow()
    db.flush()
    _record(db, principal, "cluster_template.offer", template, {"state": "draft"},
            {"version": number, "state": "offered"})
    return version_out(db, row)


def retire_version(db: Session, principal: Principal, name: str, number: int) -> VersionOut:
    """Tenants can no longer pick it; clusters made from it keep it until upgraded."""
    ensure_platform_writer(principal)
    found = template_for(db, principal, name)
    template = repository.lock_template(db, found.id)
    assert template is not None
    row = _version_row(db, template, number)
    if row.state == "retired":
        return version_out(db, row)
    if (template.name == DEFAULT_TEMPLATE and row.state == "offered"
            and repository.offered_count(db, template.id) == 1):
        raise Conflict("the default template must keep one offered version: clusters created "
                       "without a template use it")
    before = row.state
    row.state, row.retired_at = "retired", utcnow()
    db.flush()
    _record(db, principal, "cluster_template.retire", template, {"state": before},
            {"version": number, "state": "retired"})
    return version_out(db, row)


# ----- clusters


def upgrade_target(db: Session, cluster_version_id: int | None,
                   number: int | None) -> tuple[ClusterTemplate, ClusterTemplateVersion,
                                                ClusterTemplateVersion]:
    """The cluster's template, its current version and the offered version to move to."""
    current = db.get(ClusterTemplateVersion, cluster_version_id) if cluster_version_id else None
    if current is None:
        raise Conflict("this cluster was not made from a template")
    template = db.get(ClusterTemplate, current.template_id)
    assert template is not None
    target = (repository.version(db, template.id, number) if number is not None
              else repository.newest_offered(db, template.id))
    if target is None or target.state != "offered":
        raise Conflict(f"{template.name} has no offered version "
                       f"{number if number is not None else 'to upgrade to'}")
    if target.version <= current.version:
        raise Conflict(f"the cluster is on {template.name} v{current.version}; "
                       f"v{target.version} is not newer")
    return template, current, target


def upgrade_cluster(db: Session, principal: Principal, settings: Settings, slug: str,
                    name: str, number: int | None) -> ClusterOut:
    cluster = clusters.cluster_for(db, principal, slug, name, "manage")
    template, _current, target = upgrade_target(db, cluster.template_version_id, number)
    return clusters.upgrade_template(db, principal, settings, slug, name, TemplateUpgrade(
        template_version_id=target.id, label=f"{template.name} v{target.version}",
        kubernetes_version=target.kubernetes_version, placement=target.placement,
        gpu_class_id=target.gpu_class_id, max_gpus=target.max_gpus,
        pod_security=target.pod_security, user_namespaces=target.user_namespaces,
        addons=cluster_addons(target.addons or [])))


def cluster_template(db: Session, principal: Principal, slug: str,
                     name: str) -> tuple[ClusterOut, TemplateOut | None, VersionOut | None,
                                         list[VersionOut]]:
    """For the cluster's template page: the cluster, its template and version, newer offers."""
    cluster = clusters.cluster_for(db, principal, slug, name)
    out = clusters.cluster_out(db, cluster)
    current = (db.get(ClusterTemplateVersion, cluster.template_version_id)
               if cluster.template_version_id else None)
    if current is None:
        return out, None, None, []
    template = db.get(ClusterTemplate, current.template_id)
    assert template is not None
    rows = repository.versions(db, [template.id])
    newer = [version_out(db, r) for r in rows
             if r.state == "offered" and r.version > current.version]
    return (out, _template_out(db, template, rows, everything=False), version_out(db, current),
            newer)


def _audited(row: ClusterTemplateVersion) -> dict[str, Any]:
    return {"version": row.version, **settings_of(row).model_dump(mode="json")}


def _record(db: Session, principal: Principal, action: str, template: ClusterTemplate,
            before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    audit.record(db, action=action, actor_id=principal.user_id, actor_label=principal.label,
                 target_type="cluster_template", target_id=template.name, before=before,
                 after=after)
