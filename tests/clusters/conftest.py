"""Fixtures for cluster tests: acme with 16 approved H100s (64 in the fleet), the harness."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from app.database.core import Database
from tests import factories
from tests.clusters.support import Harness
from tests.support.tenancy import Tenancy, build_tenancy

ACME_H100_QUOTA = 16


@pytest.fixture
def tenancy(db: Session) -> Tenancy:
    tenancy = build_tenancy(db)
    factories.quota(db, tenancy.acme, tenancy.h100, ACME_H100_QUOTA)
    db.commit()
    return tenancy


@pytest.fixture
def harness(database: Database) -> Harness:
    return Harness.build(database)
