"""The ``portal`` command, run as an operator would run it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select

from app.auth.models import ApiToken, User
from app.auth.tokens import hash_token
from app.db import Database
from tests.support import oidc
from tests.support.web import free_port

PORTAL = [sys.executable, "-m", "app.cli"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env["PORTAL_DATABASE_URL"] = f"sqlite:///{tmp_path / 'cli.db'}"
    env.update(extra)
    return env


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PORTAL, *args], env=_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)




def test_db_upgrade_creates_the_schema(tmp_path: Path) -> None:
    result = _run(tmp_path, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    database = Database(f"sqlite:///{tmp_path / 'cli.db'}")
    with database.session() as db:
        assert db.scalars(select(User)).all() == []
    database.dispose()


def test_tokens_create_prints_the_token_alone_and_stores_only_its_hash(tmp_path: Path) -> None:
    _run(tmp_path, "db", "upgrade")
    result = _run(tmp_path, "tokens", "create", "ops@example.com", "--scope", "read",
                  "--scope", "write", "--expires-in", "1d")
    assert result.returncode == 0, result.stderr
    secret = result.stdout.strip()
    assert result.stdout == secret + "\n" and secret.startswith("gtp_")
    database = Database(f"sqlite:///{tmp_path / 'cli.db'}")
    with database.session() as db:
        token = db.scalar(select(ApiToken))
        assert token is not None
        assert token.token_hash == hash_token(secret) and secret not in token.token_hash
        assert token.scopes == ["read", "write"]
    database.dispose()


def test_tokens_create_refuses_an_unknown_scope(tmp_path: Path) -> None:
    _run(tmp_path, "db", "upgrade")
    result = _run(tmp_path, "tokens", "create", "ops@example.com", "--scope", "root")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "scopes must be" in result.stderr


def test_make_admin_grants_platform_admin(tmp_path: Path) -> None:
    _run(tmp_path, "db", "upgrade")
    assert _run(tmp_path, "users", "make-admin", "root@example.com").returncode == 0
    database = Database(f"sqlite:///{tmp_path / 'cli.db'}")
    with database.session() as db:
        user = db.scalar(select(User).where(User.email == "root@example.com"))
        assert user is not None and user.platform_admin
    database.dispose()


def test_production_with_default_secrets_refuses_to_start(tmp_path: Path) -> None:
    result = subprocess.run([*PORTAL, "db", "upgrade"], env=_env(tmp_path, PORTAL_ENV="production"),
                            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "PORTAL_SECRET_KEY" in result.stderr


def test_production_on_sqlite_refuses_to_start_and_names_the_database_url(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path, PORTAL_ENV="production", PORTAL_SECRET_KEY="s" * 40,
               PORTAL_ENCRYPTION_KEY=Fernet.generate_key().decode(),
               PORTAL_OIDC_ISSUER="https://idp.example.com")
    result = subprocess.run([*PORTAL, "db", "upgrade"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "PORTAL_DATABASE_URL is SQLite" in result.stderr
    assert not (tmp_path / "cli.db").exists()


def test_worker_starts_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    _run(tmp_path, "db", "upgrade")
    worker = subprocess.Popen([*PORTAL, "worker"], env=_env(tmp_path, PORTAL_LOG_LEVEL="INFO"),
                              cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    assert worker.stderr is not None
    started = worker.stderr.readline()
    while "started" not in started:
        started = worker.stderr.readline()
        assert started, "worker exited before starting"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert "stopped" in worker.stderr.read()


def test_webhook_without_a_host_cluster_says_so(tmp_path: Path) -> None:
    result = _run(tmp_path, "webhook", "--port", str(free_port()))
    assert result.returncode == 2
    assert "needs the host cluster" in result.stderr


@pytest.fixture
def dev_portal(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port, idp_port = free_port(), free_port()
    process = subprocess.Popen(
        [*PORTAL, "dev", "--port", str(port), "--idp-port", str(idp_port)],
        env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    yield base, process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_dev_serves_the_portal_with_working_sign_in_and_stops_on_ctrl_c(
    dev_portal: tuple[str, subprocess.Popen[str]], tmp_path: Path
) -> None:
    base, process = dev_portal
    with httpx.Client(base_url=base) as browser:
        login = browser.get("/auth/login", params={"next": "/api/v1/me"})
        assert login.status_code == 302
        callback = oidc.consent(login.headers["location"], "alice@example.com")
        assert browser.get(callback).status_code == 303
        me = browser.get("/api/v1/me").json()
    assert me["memberships"] == [{"tenant": "demo", "role": "admin"}]
    assert (tmp_path / "portal-dev.db").exists()
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert f"{base}" in output
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/healthz")
