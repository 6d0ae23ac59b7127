"""The ``portal`` command, run as an operator would run it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography.fernet import Fernet
from sqlalchemy import select

from app.auth.models import ApiToken, User
from app.auth.tokens import hash_token
from app.database.core import Database
from tests.support import oidc
from tests.support.waiting import HANG_SECONDS, wait_for
from tests.support.web import free_port

PORTAL = [sys.executable, "-m", "app.process.cli"]
# A bound on a hang: `portal dev` took over 30 s to answer with two suites on 2 cores.
STARTS_WITHIN = 180.0


def _env(tmp_path: Path, *, default_database: bool = False, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    if not default_database:
        env["PORTAL_DATABASE_URL"] = f"sqlite:///{tmp_path / 'cli.db'}"
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def migrated_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``portal db upgrade`` once for this file's tests: those that start from a migrated
    database copy it (the upgrade itself is tested below)."""
    folder = tmp_path_factory.mktemp("cli-migrated")
    upgraded = _run(folder, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    return folder / "cli.db"


def _migrated(tmp_path: Path, migrated_file: Path) -> None:
    for part in migrated_file.parent.glob(f"{migrated_file.name}*"):
        shutil.copyfile(part, tmp_path / part.name)


def _run(tmp_path: Path, *args: str,
         default_database: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PORTAL, *args], env=_env(tmp_path, default_database=default_database),
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS,
                          check=False)




def test_db_upgrade_creates_the_schema(tmp_path: Path) -> None:
    result = _run(tmp_path, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    database = Database(f"sqlite:///{tmp_path / 'cli.db'}")
    with database.session() as db:
        assert db.scalars(select(User)).all() == []
    database.dispose()


def test_tokens_create_prints_the_token_alone_and_stores_only_its_hash(
        tmp_path: Path, migrated_file: Path) -> None:
    _migrated(tmp_path, migrated_file)
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


def test_tokens_create_refuses_an_unknown_scope(tmp_path: Path, migrated_file: Path) -> None:
    _migrated(tmp_path, migrated_file)
    result = _run(tmp_path, "tokens", "create", "ops@example.com", "--scope", "root")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "scopes must be" in result.stderr


def test_make_admin_grants_platform_admin(tmp_path: Path, migrated_file: Path) -> None:
    _migrated(tmp_path, migrated_file)
    assert _run(tmp_path, "users", "make-admin", "root@example.com").returncode == 0
    database = Database(f"sqlite:///{tmp_path / 'cli.db'}")
    with database.session() as db:
        user = db.scalar(select(User).where(User.email == "root@example.com"))
        assert user is not None and user.platform_admin
    database.dispose()


def test_production_with_default_secrets_refuses_to_start(tmp_path: Path) -> None:
    result = subprocess.run([*PORTAL, "db", "upgrade"], env=_env(tmp_path, PORTAL_ENV="production"),
                            cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS,
                          check=False)
    assert result.returncode == 2
    assert "PORTAL_SECRET_KEY" in result.stderr


def test_production_on_sqlite_refuses_to_start_and_names_the_database_url(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path, PORTAL_ENV="production", PORTAL_SECRET_KEY="s" * 40,
               PORTAL_ENCRYPTION_KEY=Fernet.generate_key().decode(),
               PORTAL_OIDC_ISSUER="https://idp.example.com")
    result = subprocess.run([*PORTAL, "db", "upgrade"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=HANG_SECONDS, check=False)
    assert result.returncode == 2
    assert "PORTAL_DATABASE_URL is SQLite" in result.stderr
    assert not (tmp_path / "cli.db").exists()


STOPPED_ANYWHERE = """
import os, signal, threading
from app.process.signals import stop_on_signals

stopping = threading.Event()
stop_on_signals(stopping.set)
threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGTERM)).start()
while not stopping.wait(0):  # the worker's loop, without its pause: always near the lock
    pass
"""


def test_a_signal_stops_a_loop_waiting_on_its_event_wherever_it_lands() -> None:
    """A handler that set the Event itself deadlocked when the signal landed while the loop's
    ``Event.wait`` held the event's lock (`portal worker`, `webhook` and `lab` wait so)."""
    for _ in range(5):
        try:
            ran = subprocess.run([sys.executable, "-c", STOPPED_ANYWHERE], capture_output=True,
                                 text=True, timeout=HANG_SECONDS, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail("a SIGTERM left the process hanging")
        assert ran.returncode == 0, ran.stderr


def test_worker_starts_and_stops_cleanly_on_sigterm(tmp_path: Path, migrated_file: Path) -> None:
    _migrated(tmp_path, migrated_file)
    worker = subprocess.Popen([*PORTAL, "worker"], env=_env(tmp_path, PORTAL_LOG_LEVEL="INFO"),
                              cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    assert worker.stderr is not None
    started = worker.stderr.readline()
    while "started" not in started:
        started = worker.stderr.readline()
        assert started, "worker exited before starting"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=HANG_SECONDS) == 0
    assert "stopped" in worker.stderr.read()


def test_tokens_create_after_make_run_uses_the_database_portal_dev_migrated(
    tmp_path: Path,
) -> None:
    with running_dev(tmp_path, default_database=True) as (base, process):
        assert httpx.get(f"{base}/readyz").status_code == 200
        stop(process)
    result = _run(tmp_path, "tokens", "create", "alice@example.com", "--scope", "read",
                  default_database=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("gtp_")
    assert sorted(path.name for path in tmp_path.glob("*.db")) == ["portal.db"]


# Every command that reads or writes the database (`db` and `dev` migrate it themselves).
@pytest.mark.parametrize("command", [
    ["tokens", "create", "ops@example.com", "--scope", "read"],
    ["users", "make-admin", "ops@example.com"],
    ["serve", "--port", "0"],
    ["worker"],
    ["webhook", "--port", "0"],
    ["keys", "rotate"],
    ["quota", "check"],
], ids=" ".join)
def test_a_missing_database_is_one_line_saying_what_to_run_and_no_file(
    tmp_path: Path, command: list[str],
) -> None:
    result = _run(tmp_path, *command, default_database=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "run `portal db upgrade`" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "portal.db").exists()


def test_an_unmigrated_database_file_is_one_line_saying_what_to_run(tmp_path: Path) -> None:
    (tmp_path / "cli.db").touch()
    result = _run(tmp_path, "tokens", "create", "ops@example.com", "--scope", "read")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "cli.db is missing or not migrated: run `portal db upgrade`" in result.stderr


def test_webhook_without_a_host_cluster_says_so(tmp_path: Path, migrated_file: Path) -> None:
    _migrated(tmp_path, migrated_file)
    result = _run(tmp_path, "webhook", "--port", str(free_port()))
    assert result.returncode == 2
    assert "needs the host cluster" in result.stderr


@contextmanager
def running_dev(tmp_path: Path, *args: str, default_database: bool = False,
                **env: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port, idp_port = free_port(), free_port()
    process = subprocess.Popen(
        [*PORTAL, "dev", "--port", str(port), "--idp-port", str(idp_port), *args],
        env=_env(tmp_path, default_database=default_database, **env), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        # It migrates, starts its IdP, worker and app: seconds, minutes on a loaded machine.
        wait_for(lambda: process.poll() is not None or _ready(base), f"portal dev on {base}",
                 timeout=STARTS_WITHIN)
        assert process.poll() is None, f"portal dev exited: {process.communicate()[0]}"
        yield base, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz").status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def dev_portal(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with running_dev(tmp_path) as running:
        yield running


@contextmanager
def signed_in(base: str, email: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base) as browser:
        login = browser.get("/auth/login", params={"next": "/"})
        assert browser.get(oidc.consent(login.headers["location"], email)).status_code == 303
        yield browser


def fleet_of(browser: httpx.Client, *, at_least: int) -> list[str]:
    """Node names on the fleet API, once the worker's first inventory sync has run."""
    deadline = time.monotonic() + STARTS_WITHIN
    while True:
        items = browser.get("/api/v1/nodes", params={"limit": 100}).json()["items"]
        if len(items) >= at_least or time.monotonic() > deadline:
            return sorted(item["name"] for item in items)
        time.sleep(0.2)


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=HANG_SECONDS)
    return output


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
    assert (tmp_path / "cli.db").exists()
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=HANG_SECONDS)
    assert process.returncode == 0, output
    assert f"{base}" in output
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/healthz")


BANNER = 'data-testid="simulated-host-banner"'


def test_dev_runs_on_a_simulated_host_with_the_demo_fleet_by_default(
    dev_portal: tuple[str, subprocess.Popen[str]],
) -> None:
    base, process = dev_portal
    with signed_in(base, "admin@example.com") as admin:
        nodes = fleet_of(admin, at_least=16)
        fleet_page = admin.get("/admin/fleet").text
    assert len(nodes) == 16
    assert {"h100-r1-n1", "h100-r2-n4", "gb200-c1-n4", "l40s-n3", "a100-mig-n1"} <= set(nodes)
    assert BANNER in fleet_page
    assert "Simulated host cluster" in fleet_page
    assert "host cluster: SIMULATED" in stop(process)


def test_dev_no_simulate_runs_without_a_host(tmp_path: Path) -> None:
    with running_dev(tmp_path, "--no-simulate") as (base, process):
        with signed_in(base, "admin@example.com") as admin:
            home = admin.get("/").text
            nodes = admin.get("/api/v1/nodes").json()["items"]
        output = stop(process)
    assert BANNER not in home
    assert nodes == []
    assert "host cluster: none" in output


def test_dev_with_a_real_kubeconfig_simulates_nothing(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "host",
        "clusters": [{"name": "host", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "host", "user": {"token": "t"}}],
        "contexts": [{"name": "host", "context": {"cluster": "host", "user": "host"}}]}))
    with running_dev(tmp_path, PORTAL_KUBECONFIG=str(kubeconfig)) as (base, process):
        with signed_in(base, "admin@example.com") as admin:
            home = admin.get("/").text
        output = stop(process)
    assert BANNER not in home
    assert "host cluster: the real one" in output
    assert "SIMULATED" not in output


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_serve_and_worker_refuse_the_simulated_host(tmp_path: Path, command: str) -> None:
    result = subprocess.run([*PORTAL, command], env=_env(tmp_path, PORTAL_SIMULATED_HOST="true"),
                            cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS,
                            check=False)
    assert result.returncode == 2
    assert "use `portal dev`" in result.stderr


def _subcommands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    children = getattr(command, "commands", None) or {}
    return [path, *(found for name, child in children.items()
                    for found in _subcommands(child, (*path, name)))]


def test_every_portal_help_reads_at_80_columns_with_flags_as_flags() -> None:
    from typer.main import get_command
    from typer.testing import CliRunner

    from app.process.cli import cli

    for path in _subcommands(get_command(cli)):
        shown = CliRunner().invoke(cli, [*path, "--help"], env={"COLUMNS": "80"})
        assert shown.exit_code == 0, (path, shown.stderr)
        assert "<bool>" not in shown.stdout, path
        assert "\N{HORIZONTAL ELLIPSIS}" not in shown.stdout, path
        assert max(len(line) for line in shown.stdout.splitlines()) <= 80, path


@pytest.mark.parametrize(("files", "expected"), [
    ({"cpu.max": "150000 100000\n"}, 2),  # a container limited to 1.5 CPUs: 2 processes
    ({"cpu.max": "50000 100000\n"}, 1),
    ({"cpu.max": "max 100000\n"}, None),  # no limit: every CPU it may run on
    ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])
def test_serve_runs_one_process_per_cpu_the_container_may_use(
        tmp_path: Path, files: dict[str, str], expected: int | None) -> None:
    from app.process.serving import usable_cpus

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cpus = len(os.sched_getaffinity(0))
    assert usable_cpus(tmp_path) == min(expected, cpus) if expected else cpus


def test_serve_runs_one_process_on_sqlite() -> None:
    from app.kit.config import Settings
    from app.process.serving import serving_processes

    assert serving_processes(Settings(database_url="sqlite:///portal.db")) == 1


def test_quota_check_says_every_tenant_is_within_and_exits_0(
        tmp_path: Path, migrated_file: Path) -> None:
    _migrated(tmp_path, migrated_file)
    result = _run(tmp_path, "quota", "check")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("every tenant is within its quota")
