"""The portal as in production (one ``portal serve`` process) and the callers' credentials.

Tokens are minted with the app's own token code and sessions made through its session store,
so their hashes and cookies are exactly what the middleware checks.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO

import httpx
from cryptography.fernet import Fernet
from sqlalchemy import select

from app.auth import service as auth_service
from app.auth.models import User
from app.auth.sessions import SECURE_COOKIE, SessionPolicy, SessionStore
from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.nodes.models import NodeAssignment
from app.tenants.models import Tenant
from bench.seed import ADMIN_EMAIL, BENCH_CLASS, ROOT, Fleet, slug, user_id

ADMIN_TOKENS = 8
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class TenantCaller:
    slug: str
    token: str  # the tenant admin's API token (read, write)
    member_cookie: str  # a member's browser session


@dataclass(frozen=True)
class Credentials:
    admin_tokens: list[str]
    admin_cookie: str
    tenants: list[TenantCaller]
    tenants_with_nodes: list[str]
    gpu_class_id: int
    gpu_class: str


def mint(url: str, fleet: Fleet) -> Credentials:
    database = Database(url)
    expires = utcnow() + timedelta(days=1)
    store = SessionStore(database, SessionPolicy(idle=timedelta(hours=1),
                                                 absolute=timedelta(hours=12)))

    def session(uid: int) -> str:
        cookie = store.save(None, {"uid": uid, "csrf": secrets.token_urlsafe(32)})
        assert cookie is not None
        return cookie

    try:
        with database.transaction() as db:
            admin = db.scalar(select(User).where(User.email == ADMIN_EMAIL))
            assert admin is not None, "the seeded platform admin is missing"
            admin_tokens = [auth_service.issue_api_token(
                db, admin, name=f"bench-{n}", scopes=["read", "write", "admin"],
                expires_at=expires, actor_label="bench")[1] for n in range(ADMIN_TOKENS)]
            tokens: dict[str, str] = {}
            for number in fleet.bench_tenants():
                user = db.get(User, user_id(number, "admin"))
                assert user is not None
                tokens[slug(number)] = auth_service.issue_api_token(
                    db, user, name="bench", scopes=["read", "write"], expires_at=expires,
                    actor_label="bench")[1]
            with_nodes = list(db.scalars(
                select(Tenant.slug).join(NodeAssignment, NodeAssignment.tenant_id == Tenant.id)
                .where(NodeAssignment.ended_at.is_(None)).distinct().order_by(Tenant.slug)
                .limit(32)))
            gpu_class = db.scalar(select(GpuClass).where(GpuClass.product == BENCH_CLASS))
            assert gpu_class is not None
        callers = [TenantCaller(s, tokens[s], session(user_id(n, "member")))
                   for n, s in ((n, slug(n)) for n in fleet.bench_tenants())]
        return Credentials(admin_tokens, session(admin.id), callers, with_nodes,
                           gpu_class.id, gpu_class.product)
    finally:
        database.dispose()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json"}


def browser(cookie: str) -> dict[str, str]:
    return {"Cookie": f"{SECURE_COOKIE}={cookie}", "Accept": "text/html"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Portal:
    """``portal serve`` in production mode with secrets made for the run, on a free port."""

    def __init__(self, database_url: str, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {**os.environ, "PORTAL_ENV": "production",
                    "PORTAL_SECRET_KEY": secrets.token_urlsafe(32),
                    "PORTAL_ENCRYPTION_KEY": Fernet.generate_key().decode(),
                    # Never contacted: the benchmark signs in with sessions made in the store.
                    "PORTAL_OIDC_ISSUER": "http://127.0.0.1:9/bench-idp",
                    "PORTAL_DATABASE_URL": database_url}
        self.cwd = ROOT
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.restarts = 0
        self.peak_mb = 0.0  # the highest peak RSS of every process so far

    def command(self) -> list[str]:
        script = Path(sys.executable).with_name("portal")
        program = [str(script)] if script.exists() else [sys.executable, "-m", "app.process.cli"]
        # One process: the CPU and memory figures read this process alone.
        return [*program, "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--workers", "1"]

    def start(self, wait_s: float = 60) -> None:
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.command(), env=self.env, cwd=self.cwd,  # noqa: S603
                                        stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"portal serve exited:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"portal serve did not answer /healthz in {wait_s} s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _status(self, key: str) -> int:
        """A /proc/<pid>/status figure in KiB."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        return 0

    def rss_mb(self) -> float:
        return self._status("VmRSS") / 1024

    def peak_rss_mb(self) -> float:
        return max(self.peak_mb, self._status("VmHWM") / 1024)

    def cpu_s(self) -> float:
        assert self.process is not None
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        user, system = stat.rsplit(")", 1)[1].split()[11:13]
        return (int(user) + int(system)) / TICKS

    def errors_logged(self) -> int:
        """Requests that failed with an unexpected error, as the server logged them (the app's
        handler and uvicorn each log most of them once)."""
        if not self.log_path.exists():
            return 0
        text = self.log_path.read_text(errors="replace")
        return max(text.count("unhandled error on"), text.count("Exception in ASGI application"))

    def settle(self, answers: Callable[[], bool], max_s: float = 15, busy: float = 0.15,
               ) -> bool:
        """Waits until the server has worked off the requests a finished step left behind (their
        clients are gone, their threads are not): it idles on the CPU and ``answers`` a probe.
        Restarts it after ``max_s``; returns whether it had to."""
        started = time.monotonic()
        while time.monotonic() - started < max_s:
            before = self.cpu_s()
            time.sleep(0.5)
            if (self.cpu_s() - before) / 0.5 < busy and answers():
                return False
        self.stop()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.restarts += 1
        self.start()
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.peak_mb = max(self.peak_mb, self.peak_rss_mb())
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
