"""Alembic, driven from code (``portal db upgrade``, tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
VERSION_TABLE = "alembic_version"


def alembic_config(database_url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


def is_migrated(database_url: str) -> bool:
    """Whether the database exists and no migration of this code is still to apply.

    A revision this code does not know counts as migrated: during a rolling upgrade the older
    processes keep running on a database their successor has already migrated.
    """
    if _sqlite_file_missing(database_url):
        return False  # connecting would create an empty file
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            current = _applied_revisions(connection)
    finally:
        engine.dispose()
    if not current:
        return False
    script = ScriptDirectory.from_config(alembic_config(database_url))
    known = {revision.revision for revision in script.walk_revisions()}
    return not (current & known) - set(script.get_heads())


def _applied_revisions(connection: Connection) -> set[str]:
    # Read directly: Alembic's MigrationContext would log its setup on every command.
    if not inspect(connection).has_table(VERSION_TABLE):
        return set()
    return set(connection.execute(text("SELECT version_num FROM alembic_version")).scalars())


def _sqlite_file_missing(database_url: str) -> bool:
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return False
    return not Path(url.database).exists()


def displayed(database_url: str) -> str:
    """The URL as messages show it: never its password."""
    return make_url(database_url).render_as_string(hide_password=True)
