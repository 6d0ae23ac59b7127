"""The approval queue's live fingerprint moves with every change an admin would see, and only
platform admins may read it."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from app.kit.errors import Forbidden
from app.quotas import service
from app.quotas.schemas import ApproveIn
from tests import factories
from tests.support.tenancy import build_tenancy


def test_the_queue_version_moves_with_arrivals_and_decisions(db: Session) -> None:
    world = build_tenancy(db)
    admin = world.principal(world.platform_admin)
    empty = service.queue_version(db, admin)
    asked = factories.quota_request(db, world.acme, world.h100, gpus=8)
    arrived = service.queue_version(db, admin)
    assert arrived != empty
    assert service.queue_version(db, admin) == arrived  # nothing new, nothing to send
    service.approve(db, admin, asked.id, ApproveIn(gpus=4))
    assert service.queue_version(db, admin) != arrived


def test_only_platform_admins_read_the_queue_version(db: Session) -> None:
    world = build_tenancy(db)
    with pytest.raises(Forbidden):
        service.queue_version(db, world.principal(world.acme_admin))
