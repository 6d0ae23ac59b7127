"""Throwaway PostgreSQL databases on the machine's server (127.0.0.1:5432, trust auth)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Engine

from app.database.core import Database

ADMIN_DSN = os.environ.get("PORTAL_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def sqlalchemy_url(name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    host, port, user = info.get("host", "127.0.0.1"), info.get("port", "5432"), info["user"]
    return f"postgresql+psycopg://{user}@{host}:{port}/{name}"


def unique_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


def create_database(name: str, template: str | None = None) -> None:
    query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    with psycopg.connect(ADMIN_DSN, autocommit=True) as connection:
        if template:
            # PostgreSQL copies a template only while nobody else is connected to it.
            connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()", (template,),
            )
        connection.execute(query)


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_DSN, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextmanager
def cloned_database(template: str, prefix: str, **engine_options: Any) -> Iterator[Database]:
    """A copy of ``template``, committed to for real, dropped afterwards."""
    name = unique_name(prefix)
    create_database(name, template=template)
    database = Database(sqlalchemy_url(name), **engine_options)
    try:
        yield database
    finally:
        database.dispose()
        drop_database(name)


@contextmanager
def rolled_back(engine: Engine) -> Iterator[Database]:
    """The app's database inside one outer transaction on ``engine``, rolled back at the end."""
    with engine.connect() as connection:
        outer = connection.begin()
        yield Database.within(connection)
        outer.rollback()
