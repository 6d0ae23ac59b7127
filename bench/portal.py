"""The portal as in production (``portal serve``: a master and one serving process per CPU it may
use, or ``--workers N``) and the callers' credentials.

The server's CPU seconds and RSS are those of the master and every process below it (found in
``/proc``), so that one process or several give comparable figures.

Tokens are minted with the app's own token code and sessions made through its session store,
so their hashes and cookies are exactly what the middleware checks.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
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
from app.lab.ports import free_port
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


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name: state, ppid, ... (``proc(5)`` field 3 on)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(root: int) -> list[int]:
    """Every living process below ``root`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_stat_fields(int(entry.name))[1])
        except (OSError, IndexError, ValueError):
            continue  # gone since, or not ours to read
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    waiting = [root]
    while waiting:
        for child in children.get(waiting.pop(), []):
            found.append(child)
            waiting.append(child)
    return found


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every process below it: each one's user and system time plus
    that of its children already waited for (a worker that exited still counts)."""
    ticks = 0
    for pid in [root, *descendants(root)]:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue  # exited between the walk and now: its parent's cutime has it
        ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / TICKS


def _status_kib(pid: int, key: str) -> int:
    """A /proc/<pid>/status figure in KiB (0 for a process gone since)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def serving_pids(root: int) -> list[int]:
    """The processes that serve requests: uvicorn's spawned workers, else the master itself."""
    workers = []
    for pid in descendants(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            workers.append(pid)
    return workers or [root]


class Portal:
    """``portal serve`` in production mode with secrets made for the run, on a free port.

    ``workers``: its ``--workers``; None runs its default, the production process model (one
    serving process per CPU it may use)."""

    def __init__(self, database_url: str, log_path: Path, workers: int | None = None) -> None:
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {**os.environ, "PORTAL_ENV": "production",
                    "PORTAL_SECRET_KEY": secrets.token_urlsafe(32),
                    "PORTAL_ENCRYPTION_KEY": Fernet.generate_key().decode(),
                    # Never contacted: the benchmark signs in with sessions made in the store.
                    "PORTAL_OIDC_ISSUER": "http://127.0.0.1:9/bench-idp",
                    "PORTAL_DATABASE_URL": database_url,
                    # A benchmark's writes pile up in one tenant: what is measured is their
                    # cost, not the limits a shared service puts on how many one may hold.
                    "PORTAL_TENANT_MAX_PENDING_QUOTA_REQUESTS": "10000",
                    "PORTAL_TENANT_MAX_CLUSTERS": "100000",
                    "PORTAL_USER_MAX_LIVE_TOKENS": "10000"}
        # The default process model is the one measured, not whatever this shell exports.
        self.env.pop("PORTAL_WEB_WORKERS", None)
        self.cwd = ROOT
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.restarts = 0
        self.starts_logged = 0  # "Application startup complete" lines before this start
        self.peak_mb = 0.0  # the highest peak RSS of every process so far

    def command(self) -> list[str]:
        script = Path(sys.executable).with_name("portal")
        program = [str(script)] if script.exists() else [sys.executable, "-m", "app.process.cli"]
        return [*program, "serve", "--host", "127.0.0.1", "--port", str(self.port),
                *self.workers_option()]

    def workers_option(self) -> list[str]:
        return [] if self.workers is None else ["--workers", str(self.workers)]

    def start(self, wait_s: float = 120) -> None:
        self.starts_logged = (self.log_path.read_text(errors="replace").count(
            "Application startup complete") if self.log_path.exists() else 0)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.command(), env=self.env, cwd=self.cwd,  # noqa: S603
                                        stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"portal serve exited:\n{self.log_tail()}")
            try:
                if (httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
                        and self._all_started()):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"portal serve did not answer /healthz in {wait_s} s:\n"
                           f"{self.log_tail()}")

    def _all_started(self) -> bool:
        """Every serving process has started its app (the first to answer /healthz may be
        alone yet; the others' start-up would be counted as the first step's CPU)."""
        expected = self.workers or len(serving_pids(self.pid))
        if expected == 1:
            return True  # the one that answered
        started = self.log_path.read_text(errors="replace").count("Application startup complete")
        return started >= self.starts_logged + expected

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def processes(self) -> int:
        """Processes serving requests now (the master alone, or its workers)."""
        return len(serving_pids(self.pid))

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _tree_kib(self, key: str) -> list[int]:
        return [_status_kib(pid, key) for pid in [self.pid, *descendants(self.pid)]]

    def rss_mb(self) -> float:
        """The RSS of the master and all its processes, summed (pages they share counted in
        each)."""
        return sum(self._tree_kib("VmRSS")) / 1024

    def largest_rss_mb(self) -> float:
        """The RSS of the largest single process."""
        return max(self._tree_kib("VmRSS")) / 1024

    def peak_rss_mb(self) -> float:
        """The sum of each process's own peak RSS (at most that, since they need not peak at
        once), the highest of every server of the run."""
        return max(self.peak_mb, sum(self._tree_kib("VmHWM")) / 1024)

    def cpu_s(self) -> float:
        return tree_cpu_s(self.pid)

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
            self.process.terminate()  # uvicorn's master stops its workers
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                below = descendants(self.process.pid)
                self.process.kill()
                self.process.wait()
                for pid in below:  # killed, the master could not stop them
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
