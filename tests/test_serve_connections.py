"""`portal serve` with several processes: a warning at start when they may open more database
connections than PostgreSQL admits, and time for each new process to start."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.fernet import Fernet
from typer.testing import CliRunner

from app.kit.config import get_settings
from app.process.balance import SHARES_ENV
from tests.support import postgres

THREADS = 8
PER_PROCESS = THREADS + 4 + 1  # a connection per thread, 4 spare, the change listener


def _admitted() -> int:
    with psycopg.connect(postgres.ADMIN_DSN) as connection:
        allowed = int(connection.execute("SHOW max_connections").fetchone()[0])  # type: ignore[index]
        reserved = int(connection.execute(
            "SHOW superuser_reserved_connections").fetchone()[0])  # type: ignore[index]
    return allowed - reserved


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, pg_template: str) -> Iterator[list[dict[str, Any]]]:
    """`portal serve` against the migrated database, uvicorn replaced by a note of its call."""
    import uvicorn

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *_args, **kwargs: calls.append(kwargs))
    for name, value in {"PORTAL_DATABASE_URL": postgres.sqlalchemy_url(pg_template),
                        "PORTAL_ENV": "development", "PORTAL_WEB_THREADS": str(THREADS),
                        "PORTAL_ENCRYPTION_KEY": Fernet.generate_key().decode()}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PORTAL_WEB_WORKERS", raising=False)
    get_settings.cache_clear()
    yield calls
    get_settings.cache_clear()


def _serve(workers: int) -> str:
    from app.process.cli import cli

    result = CliRunner().invoke(cli, ["serve", "--workers", str(workers)])
    assert result.exit_code == 0, result.output
    return result.stderr


def test_serve_warns_when_its_processes_may_open_more_connections_than_postgresql_admits(
        served: list[dict[str, Any]]) -> None:
    too_many = math.ceil(_admitted() / PER_PROCESS) + 1
    warned = _serve(too_many)
    assert f"{too_many} serving processes may open {too_many * PER_PROCESS} database " \
           "connections" in warned
    assert "max_connections" in warned
    assert served[-1]["workers"] == too_many  # a warning, not a refusal


def test_serve_starts_without_a_warning_when_the_connections_fit(
        served: list[dict[str, Any]]) -> None:
    assert "database connections" not in _serve(1)
    assert served


def test_serve_gives_a_new_serving_process_time_to_import_the_app_on_a_busy_machine(
        served: list[dict[str, Any]]) -> None:
    """uvicorn's master kills a process that does not answer its ping in time; a new one answers
    only once it has imported the app (seconds on a busy core)."""
    _serve(2)
    assert served[-1]["workers"] == 2 and served[-1]["timeout_worker_healthcheck"] >= 30


def test_serve_shares_a_file_with_its_processes_while_they_run_and_removes_it_after(
        served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Its processes find the file in their environment (``app.process.balance``); nothing of
    it outlives the server."""
    import uvicorn

    seen: list[tuple[Path, bool]] = []

    def run(*_args: Any, **_kwargs: Any) -> None:
        shared = Path(os.environ[SHARES_ENV])
        seen.append((shared, shared.exists()))

    monkeypatch.setattr(uvicorn, "run", run)
    _serve(2)
    [(shared, existed)] = seen
    assert existed and not shared.exists()
    assert SHARES_ENV not in os.environ


def test_serve_still_serves_when_it_has_nowhere_to_write_the_shared_file(
        served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    from app.process import balance

    def read_only() -> Path:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(balance, "create_shares_file", read_only)
    warned = _serve(2)
    assert served[-1]["workers"] == 2
    assert "will not balance their connections: [Errno 30] Read-only file system" in warned
