"""Alembic environment: the URL comes from the caller's config or from PORTAL_DATABASE_URL."""

from __future__ import annotations

from alembic import context

import app.models  # noqa: F401 - registers every table on the metadata
from app.config import get_settings
from app.db import Base, make_engine

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(url)
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


def _run(connection: object) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=url.startswith("sqlite"),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
