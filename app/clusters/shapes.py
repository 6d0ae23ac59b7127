"""The seam through which a higher domain (templates) shapes cluster creation.

The clusters domain must not import the templates domain, so it names what it needs here and
the application wires the templates implementation in (``app.state.template_resolver``). Without
one (tests of the clusters domain alone, the bench), creates work as before templates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import Request
from sqlalchemy.orm import Session

from app.clusters.schemas import ClusterCreate


@dataclass(frozen=True)
class ClusterAddon:
    """A Helm chart the reconciler installs into the virtual cluster once it is Ready.

    ``values`` were built by the templates domain from the template's own settings; the
    clusters domain stores and installs them as they are and never adds tenant input.
    """

    name: str
    repo: str
    chart: str
    version: str
    values: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "repo": self.repo, "chart": self.chart,
                "version": self.version, "values": self.values}

    @classmethod
    def of_json(cls, stored: dict[str, Any]) -> ClusterAddon:
        return cls(name=stored["name"], repo=stored["repo"], chart=stored["chart"],
                   version=stored["version"], values=dict(stored.get("values") or {}))


@dataclass(frozen=True)
class ResolvedCreate:
    """A create request with everything its template fixes filled in."""

    payload: ClusterCreate
    template_version_id: int
    pod_security: str | None
    user_namespaces: bool
    addons: tuple[ClusterAddon, ...] = ()
    # The template's sleep policy defaults the new cluster takes (field -> value).
    sleep_policy: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TemplateChoice:
    """One offered template as the create form shows it."""

    name: str
    version: int
    description: str
    # Settings the template fixes (field -> value); the form asks only for the others.
    fixed: dict[str, Any] = field(default_factory=dict)
    default_gpus: int = 0
    max_gpus: int | None = None


class TemplateResolver(Protocol):
    def resolve(self, db: Session, payload: ClusterCreate) -> ResolvedCreate:
        """The concrete create request; ValidationFailed when the payload sets a fixed field."""
        ...

    def choices(self, db: Session) -> list[TemplateChoice]:
        """The templates a tenant may create clusters from, the default first."""
        ...


async def template_resolver(request: Request) -> TemplateResolver | None:
    resolver: TemplateResolver | None = getattr(request.app.state, "template_resolver", None)
    return resolver


@dataclass(frozen=True)
class TemplateUpgrade:
    """What moving a cluster to another template version changes. None: the version leaves it
    open, so the cluster keeps its value."""

    template_version_id: int
    label: str  # "training v2", for messages and the audit trail
    kubernetes_version: str | None
    placement: str | None
    gpu_class_id: int | None
    max_gpus: int | None
    pod_security: str | None
    user_namespaces: bool
    addons: tuple[ClusterAddon, ...] = ()
