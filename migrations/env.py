"""Alembic environment: the URL comes from the caller's config or from PORTAL_DATABASE_URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from alembic import context
from sqlalchemy import Connection

import app.process.all_models  # noqa: F401 - registers every table on the metadata
from app.database.core import Base, make_engine
from app.kit.config import get_settings

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
    with engine.connect() as connection, _sqlite_foreign_keys_checked_after(connection):
        _run(connection)
    engine.dispose()


@contextmanager
def _sqlite_foreign_keys_checked_after(connection: Connection) -> Iterator[None]:
    """SQLite's batch mode rebuilds a table (copy, drop, rename), and with foreign keys on,
    dropping a table that other rows point at fails. They are off while migrating (a pragma
    that only works outside a transaction) and checked once at the end."""
    if connection.dialect.name != "sqlite":
        yield
        return
    outside_a_transaction = connection.connection.driver_connection
    assert outside_a_transaction is not None
    outside_a_transaction.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
    finally:
        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
        connection.commit()
        outside_a_transaction.execute("PRAGMA foreign_keys=ON")
    if broken:
        raise RuntimeError(f"the migration left rows pointing nowhere: {broken[:5]}")


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
