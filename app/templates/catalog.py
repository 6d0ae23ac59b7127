"""The templates domain's side of cluster creation: a template into concrete cluster inputs.

Wired into the app as ``app.state.template_resolver`` (see app/clusters/shapes.py), so that the
clusters domain's create endpoint and form go through templates without importing them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.clusters.schemas import ClusterCreate
from app.clusters.shapes import ResolvedCreate, TemplateChoice
from app.database.kept import Kept
from app.kit.errors import ValidationFailed
from app.templates import repository
from app.templates.addons import cluster_addons
from app.templates.models import DEFAULT_TEMPLATE, ClusterTemplate, ClusterTemplateVersion

# The sleep policy a version may give its new clusters (app.clusters.sleep_policy).
SLEEP_DEFAULTS = ("never_sleep", "sleep_after_idle_minutes", "idle_measure", "sleep_schedule",
                  "sleep_timezone", "delete_after_sleep_days")


def sleep_defaults(row: ClusterTemplateVersion) -> dict[str, Any]:
    return {name: getattr(row, name) for name in SLEEP_DEFAULTS if getattr(row, name) is not None}


# The settings a template may fix, as the cluster create request names them.
FIXABLE = ("placement", "kubernetes_version", "gpu_class_id")


class TemplateCatalog:
    def resolve(self, db: Session, payload: ClusterCreate) -> ResolvedCreate:
        template_name, row = self._offered(db, payload.template or DEFAULT_TEMPLATE,
                                           payload.template_version)
        label = f"template {template_name} v{row.version}"
        given = payload.model_fields_set
        update: dict[str, object] = {"template": template_name, "template_version": row.version}
        for name in FIXABLE:
            fixed = getattr(row, name)
            if fixed is None:
                continue
            if name in given:
                raise ValidationFailed.on_field(
                    name, f"{label} fixes {name.replace('_', ' ')} ({fixed}); leave it out")
            update[name] = fixed
        gpus = payload.gpus if "gpus" in given else row.default_gpus
        if row.max_gpus is not None and gpus > row.max_gpus:
            raise ValidationFailed.on_field("gpus", f"{label} allows at most {row.max_gpus} GPUs")
        update["gpus"] = gpus
        return ResolvedCreate(payload=payload.model_copy(update=update),
                              template_version_id=row.id, pod_security=row.pod_security,
                              user_namespaces=row.user_namespaces,
                              addons=cluster_addons(row.addons or []),
                              sleep_policy=sleep_defaults(row))

    def choices(self, db: Session) -> list[TemplateChoice]:
        return list(_offered_choices.get(db))

    def _offered(self, db: Session, name: str,
                 number: int | None) -> tuple[str, ClusterTemplateVersion | Any]:
        """The template's name and the version asked for: a ``ClusterTemplateVersion`` or a
        row of its columns."""
        if number is None:
            found = repository.newest_offered_by_name(db, name)
            if found is None:
                raise ValidationFailed.on_field("template", f"no offered cluster template {name}")
            return found.template_name, found
        template = repository.template_by_name(db, name)
        row = repository.version(db, template.id, number) if template is not None else None
        if template is None or row is None or row.state != "offered":
            field = "template_version" if template is not None and number else "template"
            raise ValidationFailed.on_field(field, f"no offered cluster template {name} v{number}")
        return template.name, row


def _read_choices(db: Session) -> tuple[TemplateChoice, ...]:
    found = [_choice(template, row) for template, row in repository.newest_offered_of_each(db)]
    return tuple(sorted(found, key=lambda c: (c.name != DEFAULT_TEMPLATE, c.name)))


# Every tenant's create form shows the catalogue, which an operator changes now and then: a
# version offered or retired through another process shows within the kept figures' age,
# and a create always reads the version it names afresh.
_offered_choices = Kept("template_choices", (ClusterTemplate, ClusterTemplateVersion),
                        _read_choices)


def _choice(template: ClusterTemplate, row: ClusterTemplateVersion) -> TemplateChoice:
    fixed = {name: getattr(row, name) for name in FIXABLE if getattr(row, name) is not None}
    return TemplateChoice(name=template.name, version=row.version,
                          description=template.description, fixed=fixed,
                          default_gpus=row.default_gpus, max_gpus=row.max_gpus)
