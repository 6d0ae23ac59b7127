"""Database connections `portal serve` may open, against what PostgreSQL admits."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from app.database.core import TimeLimits
from app.kit.config import Settings

# Pooled connections a serving process opens past one per thread, under bursts.
SPARE_CONNECTIONS = 4
# The principal cache's LISTEN connection, outside the pool.
LISTENER_CONNECTIONS = 1


def web_time_limits(settings: Settings) -> TimeLimits:
    return TimeLimits(lock_wait=settings.web_lock_timeout_seconds,
                      statement=settings.web_statement_timeout_seconds,
                      idle_in_transaction=settings.web_idle_transaction_seconds)


def worker_time_limits(settings: Settings) -> TimeLimits:
    return TimeLimits(lock_wait=settings.worker_lock_timeout_seconds,
                      statement=settings.worker_statement_timeout_seconds,
                      idle_in_transaction=settings.worker_idle_transaction_seconds)


def connections_per_process(settings: Settings) -> int:
    return settings.web_threads + SPARE_CONNECTIONS + LISTENER_CONNECTIONS


def shortfall(settings: Settings, processes: int) -> str | None:
    """A warning when ``processes`` serving processes may open more connections than the
    PostgreSQL server admits for ordinary roles; None when they fit, off PostgreSQL, or when the
    server cannot be asked (the start goes on: serving finds out soon enough)."""
    if settings.is_sqlite:
        return None
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as connection:
            allowed = int(connection.execute(text("SHOW max_connections")).scalar_one())
            reserved = int(connection.execute(
                text("SHOW superuser_reserved_connections")).scalar_one())
    except SQLAlchemyError:
        return None
    finally:
        engine.dispose()
    each = connections_per_process(settings)
    wanted = processes * each
    if wanted <= allowed - reserved:
        return None
    return (f"{processes} serving processes may open {wanted} database connections "
            f"({settings.web_threads} threads + {SPARE_CONNECTIONS} spare + "
            f"{LISTENER_CONNECTIONS} listener each), more than PostgreSQL admits "
            f"(max_connections {allowed}, {reserved} reserved for superusers), before the "
            "worker's and any other client's: under load requests would fail to connect. "
            "Raise max_connections, or lower PORTAL_WEB_WORKERS or PORTAL_WEB_THREADS")
