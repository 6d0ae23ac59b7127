"""Regions: where the registered host clusters are, and what a request's region means.

A quota row, a quota request and a placed cluster always hold a concrete region: the region of
host clusters. Where a caller may leave the region out (``''`` or none), it means "the only
region": accepted while every host cluster is in one region (the single-host installation keeps
working unchanged), refused with the regions to choose from once there are several. A named
region must be one a host cluster is in.

The regions are kept briefly (``app.database.kept``): a host registered through another process
shows within ``MAX_AGE_SECONDS``, and a region not among the kept ones is read again before it
is refused, so a request never fails for a region a host was just registered in.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.kept import Kept
from app.hosts.models import HostCluster
from app.kit.errors import ValidationFailed

MAX_AGE_SECONDS = 2.0


def _read(db: Session) -> tuple[str, ...]:
    return tuple(sorted(set(db.scalars(select(HostCluster.region).distinct()))))


_kept = Kept("fleet_regions", (HostCluster,), _read, MAX_AGE_SECONDS)


def fleet_regions(db: Session) -> list[str]:
    """The regions of the registered host clusters, sorted, as read at most
    ``MAX_AGE_SECONDS`` ago."""
    return list(_kept.get(db))


def resolve(db: Session, region: str | None, field: str = "region") -> str:
    """The concrete region a request means; ValidationFailed naming ``field`` otherwise."""
    regions = fleet_regions(db)
    if region and region not in regions:
        regions = list(_read(db))  # registered a moment ago, perhaps through another process
    if region:
        if region not in regions:
            raise ValidationFailed.on_field(
                field, f"no host cluster is in region {region!r}; {_choices(regions)}")
        return region
    if len(regions) <= 1:
        return regions[0] if regions else ""
    raise ValidationFailed.on_field(field, f"the fleet spans regions: {_choices(regions)}")


def _choices(regions: list[str]) -> str:
    named = [r for r in regions if r]
    return ("choose one of " + ", ".join(named)) if named else "leave it empty"
