"""SQL for cluster templates and their versions. Templates are the operator's catalogue, not
tenant data: no tenant scoping applies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from app.database.concurrency import lock_row
from app.database.prepared import Prepared
from app.templates.models import ClusterTemplate, ClusterTemplateVersion


def templates(db: Session) -> Sequence[ClusterTemplate]:
    return db.scalars(select(ClusterTemplate).order_by(ClusterTemplate.name)).all()


def template_by_name(db: Session, name: str) -> ClusterTemplate | None:
    return db.scalar(select(ClusterTemplate).where(ClusterTemplate.name == name))


def lock_template(db: Session, template_id: int) -> ClusterTemplate | None:
    """New versions of one template queue here, so two never get the same number."""
    return lock_row(db, ClusterTemplate, template_id)


def versions(db: Session, template_ids: Sequence[int]) -> Sequence[ClusterTemplateVersion]:
    return db.scalars(select(ClusterTemplateVersion)
                      .where(ClusterTemplateVersion.template_id.in_(list(template_ids)))
                      .order_by(ClusterTemplateVersion.template_id,
                                ClusterTemplateVersion.version)).all()


def version(db: Session, template_id: int, number: int) -> ClusterTemplateVersion | None:
    return db.scalar(select(ClusterTemplateVersion).where(
        ClusterTemplateVersion.template_id == template_id,
        ClusterTemplateVersion.version == number))


def newest_version(db: Session, template_id: int) -> ClusterTemplateVersion | None:
    return db.scalar(select(ClusterTemplateVersion)
                     .where(ClusterTemplateVersion.template_id == template_id)
                     .order_by(ClusterTemplateVersion.version.desc()).limit(1))


def newest_offered(db: Session, template_id: int) -> ClusterTemplateVersion | None:
    return db.scalar(select(ClusterTemplateVersion)
                     .where(ClusterTemplateVersion.template_id == template_id,
                            ClusterTemplateVersion.state == "offered")
                     .order_by(ClusterTemplateVersion.version.desc()).limit(1))


def newest_offered_of_each(
    db: Session,
) -> Sequence[tuple[ClusterTemplate, ClusterTemplateVersion]]:
    """Every template that offers a version, with its newest offered one, in one statement."""
    newest = (select(ClusterTemplateVersion.template_id,
                     func.max(ClusterTemplateVersion.version).label("version"))
              .where(ClusterTemplateVersion.state == "offered")
              .group_by(ClusterTemplateVersion.template_id).subquery())
    rows = db.execute(select(ClusterTemplate, ClusterTemplateVersion)
                      .join(newest, newest.c.template_id == ClusterTemplate.id)
                      .join(ClusterTemplateVersion,
                            (ClusterTemplateVersion.template_id == newest.c.template_id)
                            & (ClusterTemplateVersion.version == newest.c.version))
                      .order_by(ClusterTemplate.name))
    return [(template, version) for template, version in rows]


_NEWEST_OFFERED = Prepared(
    select(ClusterTemplate.name.label("template_name"),
           *ClusterTemplateVersion.__table__.columns)
    .join(ClusterTemplateVersion, ClusterTemplateVersion.template_id == ClusterTemplate.id)
    .where(ClusterTemplate.name == bindparam("name"), ClusterTemplateVersion.state == "offered")
    .order_by(ClusterTemplateVersion.version.desc()).limit(1))


def newest_offered_by_name(db: Session, name: str) -> Any | None:
    """The newest offered version of the template of that name, as a row of the version's
    columns and ``template_name``, in one statement (a create from a template reads it on every
    request); None when either is missing."""
    rows = _NEWEST_OFFERED.rows(db, {"name": name})
    return rows[0] if rows else None


def offered_count(db: Session, template_id: int) -> int:
    return db.scalar(select(func.count()).select_from(ClusterTemplateVersion).where(
        ClusterTemplateVersion.template_id == template_id,
        ClusterTemplateVersion.state == "offered")) or 0
