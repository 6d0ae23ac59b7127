"""``portal dev-idp``: the local OIDC provider alone, for docker-compose.yml's demo sign-in."""

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
from fastapi.testclient import TestClient

from tests.conftest import ADMIN_GROUP
from tests.support import oidc
from tests.support.web import free_port

PORTAL = [sys.executable, "-m", "app.process.cli"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def dev_idp(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        [*PORTAL, "dev-idp", "--host", "127.0.0.1", "--port", str(port)],
        env=_env(PORTAL_OIDC_ADMIN_GROUP=ADMIN_GROUP), cwd=tmp_path_factory.mktemp("idp"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    issuer = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(f"{issuer}/.well-known/openid-configuration").raise_for_status()
            break
        except httpx.TransportError:
            time.sleep(0.1)
    yield issuer, process
    if process.poll() is None:
        process.kill()
        process.wait(10)


@pytest.fixture
def oidc_issuer(dev_idp: tuple[str, subprocess.Popen[str]]) -> str:
    return dev_idp[0]


def test_dev_idp_serves_the_discovery_document_at_its_own_address(oidc_issuer: str) -> None:
    metadata = httpx.get(f"{oidc_issuer}/.well-known/openid-configuration").json()
    assert metadata["issuer"] == oidc_issuer
    assert metadata["authorization_endpoint"].startswith(oidc_issuer)


def test_the_demo_admin_signs_in_to_the_portal_as_a_platform_admin(client: TestClient) -> None:
    oidc.sign_in(client, "admin@example.com")
    me = client.get("/api/v1/me").json()
    assert me["email"] == "admin@example.com" and me["platform_admin"] is True


def test_a_demo_member_signs_in_without_platform_rights(client: TestClient) -> None:
    oidc.sign_in(client, "bob@example.com")
    me = client.get("/api/v1/me").json()
    assert me["name"] == "Bob Example" and me["platform_admin"] is False


def test_dev_idp_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    process = subprocess.Popen([*PORTAL, "dev-idp", "--port", str(free_port())], env=_env(),
                               cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert "development only" in process.stdout.readline()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0


def test_dev_idp_is_refused_in_production(tmp_path: Path) -> None:
    env = _env(PORTAL_ENV="production", PORTAL_SECRET_KEY="s" * 48,
               PORTAL_ENCRYPTION_KEY="k" * 43 + "=", PORTAL_OIDC_ISSUER="https://idp.example.com",
               PORTAL_DATABASE_URL="postgresql+psycopg://portal@db/portal")
    result = subprocess.run([*PORTAL, "dev-idp", "--port", str(free_port())], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "refused when PORTAL_ENV=production" in result.stderr
