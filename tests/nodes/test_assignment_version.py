"""The fleet's and a node's live fingerprints move when a node is dedicated or given back, or
turns not ready; a last-seen heartbeat alone does not move them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.core import utcnow
from app.hosts.models import HostCluster
from app.nodes import service
from app.nodes.schemas import AssignmentIn
from tests import factories
from tests.support.tenancy import build_tenancy


def test_assignment_versions_move_with_what_the_pages_show(db: Session) -> None:
    world = build_tenancy(db, nodes=0)
    host = db.scalars(select(HostCluster)).one()
    host.is_default = True
    first, second = (factories.node(db, host, world.h100, name) for name in ("n1", "n2"))
    factories.quota(db, world.acme, world.h100, 16)
    admin = world.principal(world.platform_admin)
    fleet, node = service.assignment_version(db, admin), service.assignment_version(db, admin,
                                                                                    "n1")
    second.last_seen_at = utcnow()
    db.flush()
    assert service.assignment_version(db, admin) == fleet  # a heartbeat is not news
    service.assign_node(db, admin, "n1", AssignmentIn(tenant="acme"))
    assigned = service.assignment_version(db, admin)
    assert assigned != fleet and service.assignment_version(db, admin, "n1") != node
    unrelated = service.assignment_version(db, admin, "n2")
    service.end_assignment(db, admin, "n1")
    assert service.assignment_version(db, admin) != assigned
    assert service.assignment_version(db, admin, "n2") == unrelated  # the other node's stream
    given_back = service.assignment_version(db, admin, "n1")
    first.ready = False
    db.flush()
    assert service.assignment_version(db, admin, "n1") != given_back
