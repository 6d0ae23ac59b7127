"""SQL for host clusters."""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import Select, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.database.core import Base
from app.database.kept import Kept
from app.hosts.models import HostCluster

DEFAULT_HOST_CLUSTER = "default"


def hosts_in(region: Any) -> Select[int]:
    """The ids of the host clusters in a region (a value or a correlated column).

    Why ``correlate_except``: SQLAlchemy correlates a subquery to its immediate enclosing
    select only, and this one sits two levels below the row whose region it names (in a sum's
    ``IN``): left to that, it would join that row's table again and take the hosts of every
    region any of its rows names."""
    return select(HostCluster.id).where(HostCluster.region == region).correlate_except(HostCluster)


def all_hosts(db: Session) -> list[HostCluster]:
    return list(db.scalars(select(HostCluster).order_by(HostCluster.name)))


def host_by_name(db: Session, name: str, *, lock: bool = False) -> HostCluster | None:
    query = select(HostCluster).where(HostCluster.name == name)
    return db.scalar(query.with_for_update() if lock else query)


def host_by_id(db: Session, host_id: int) -> HostCluster | None:
    return db.get(HostCluster, host_id)


def default_host(db: Session) -> HostCluster | None:
    """The environment's host, read once per session (a page asks for it more than once)."""
    found: HostCluster | None = db.info.get("default_host_cluster")
    if found is None:
        found = db.scalar(select(HostCluster).where(HostCluster.is_default.is_(True))
                          .order_by(HostCluster.id).limit(1))
        if found is not None:
            db.info["default_host_cluster"] = found
    return found


class HostRef(NamedTuple):
    """What a listing needs of a host cluster: not its credentials' ciphertext or health."""

    id: int
    name: str


def host_ref(db: Session, name: str | None) -> HostRef | None:
    """The host cluster of this name, or the environment's (the default) for None: kept
    briefly (``app.database.kept``), a rename through another process shows within 2 s."""
    return _default_ref.get(db) if name is None else _ref(db, HostCluster.name == name)


def _ref(db: Session, *where: Any) -> HostRef | None:
    row = db.execute(select(HostCluster.id, HostCluster.name).where(*where)
                     .order_by(HostCluster.id).limit(1)).first()
    return None if row is None else HostRef(row.id, row.name)


def _read_default_ref(db: Session) -> HostRef | None:
    return _ref(db, HostCluster.is_default.is_(True))


_default_ref = Kept("default_host_ref", (HostCluster,), _read_default_ref)


def ensure_default_host(db: Session) -> HostCluster:
    """The environment's host; a parallel worker creating it too is fine. Migration 0009 makes
    it, so only a database built without migrations (tests) gets here with none."""
    found = default_host(db)
    if found is not None:
        return found
    try:
        with db.begin_nested():
            row = HostCluster(name=DEFAULT_HOST_CLUSTER, is_default=True, credential_kind="env")
            db.add(row)
        return row
    except IntegrityError:
        existing = host_by_name(db, DEFAULT_HOST_CLUSTER)
        assert existing is not None
        return existing


def forget_cached_default(db: Session) -> None:
    db.info.pop("default_host_cluster", None)


def first_open_host(db: Session) -> HostCluster | None:
    """The host new clusters go to: the default one while it is active, else the oldest
    active one the portal can reach (it has stored credentials)."""
    reachable = HostCluster.is_default.is_(True) | HostCluster.credentials_encrypted.is_not(None)
    return db.scalar(select(HostCluster).where(HostCluster.state == "active", reachable)
                     .order_by(HostCluster.is_default.desc(), HostCluster.id).limit(1))


def references(db: Session, host_id: int) -> dict[str, int]:
    """Rows of any table that point at the host (nodes, clusters, whatever comes later), by
    table; read from the foreign keys, so hosts need not know the domains above it."""
    found: dict[str, int] = {}
    for table in Base.metadata.sorted_tables:
        for key in table.foreign_keys:
            if key.column.table.name != HostCluster.__tablename__:
                continue
            count = db.scalar(select(func.count()).select_from(table)
                              .where(key.parent == host_id)) or 0
            if count:
                found[table.name] = found.get(table.name, 0) + count
    return found
