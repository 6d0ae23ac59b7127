"""The OpenAPI document is the contract: fuzzed requests never get a server error.

Runs against a world with a tenant, a GPU class and a pending quota request, as a platform
admin, so that generated requests reach the services rather than stopping at authorization.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from sqlalchemy.orm import Session

from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from tests.authz.world import build_world
from tests.support.kube import InMemoryConnector

EXAMPLES_PER_OPERATION = 8


def test_no_request_gets_a_server_error(
    settings: Settings, database: Database, db: Session
) -> None:
    world = build_world(db)
    db.commit()
    app = create_app(settings, database, kube=InMemoryConnector())
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = world.callers["platform_admin"].headers
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # an invalid operation fails here, loudly
    assert len(operations) > 30
    for operation in operations:
        _fuzz(operation, headers)


def _fuzz(operation: Any, headers: dict[str, str]) -> None:
    @given(case=operation.as_strategy())
    @hypothesis_settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None,
                         suppress_health_check=list(HealthCheck), database=None)
    def check(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=[not_a_server_error])

    check()
