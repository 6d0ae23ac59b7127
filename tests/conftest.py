"""Fixtures: a migrated throwaway PostgreSQL per run, a rolled-back transaction per test,
the embedded SQLite default, the local OIDC provider and the app under test."""

from __future__ import annotations

import logging
import shutil
import signal
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Browser
from sqlalchemy.orm import Session

from app.database import migrate
from app.database.core import Database
from app.kit import logs
from app.kit.config import Settings
from app.kube.adapter import KubernetesAdapter
from app.process.asgi import create_app
from app.process.devmode import demo_users, local_oidc_provider
from app.process.wiring import connect_hooks
from app.web import live
from tests.authz.world import World, build_world
from tests.deploy.kustomize import NAMESPACE as PORTAL_NAMESPACE
from tests.support import chromium, postgres
from tests.support.kube_server import (
    MISSING,
    ApiServer,
    install_crds,
    kube_assets,
    skip_unless_ci,
)
from tests.support.paths import KAI_QUEUE_CRD
from tests.support.route_state import share_route_state_across_apps

# Many tests call services directly; the web app, worker and CLI connect these at start.
connect_hooks()
# An app per test: the routes' state is built once (tests/support/route_state.py).
share_route_state_across_apps()

# The tests' own calls to the processes they serve (httpx.get(url), httpx.Client()): on a
# machine the parallel suite loads, a first page can take longer than httpx's default 5 s.
# (The app passes its own bound on every call it makes.)
TEST_HTTP_TIMEOUT_SECONDS = 30.0
for _phase in ("connect", "read", "write", "pool"):
    setattr(httpx._config.DEFAULT_TIMEOUT_CONFIG, _phase, TEST_HTTP_TIMEOUT_SECONDS)

warnings.filterwarnings("ignore", module="authlib")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="starlette")

ADMIN_GROUP = "platform-admins"


# ----- the run in parallel (`make test`: pytest-xdist, `--dist loadgroup`)

# Tests that mostly wait (for a lab, a browser, a real API server) start first, so that they
# wait beside the CPU-bound tests rather than after them.
WAITING_MARKERS = ("browser", "kube_server")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A worker takes a whole file (its module fixtures start once) or a group its modules name
    (``xdist_group``: files that share one lab, or must not run at once); a ``spread`` module's
    tests are dealt out one by one. The labs start first, then the files that wait, the spread
    tests last, filling the workers' ends (`make test` keeps this order:
    --no-loadscope-reorder)."""
    group_of = {item.nodeid: _worker_group(item) for item in items}
    order: dict[str, int] = {}
    for item in items:
        group = group_of[item.nodeid]
        if item.get_closest_marker("xdist_group") is None and group != SPREAD:
            item.add_marker(pytest.mark.xdist_group(group))
        start = _start_order(item)
        order[group] = min(order.get(group, start), start)
    size = Counter(group_of.values())
    # the larger groups of a kind first, so that the last ones to start are short
    items.sort(key=lambda item: (order[group_of[item.nodeid]], -size[group_of[item.nodeid]]))


SPREAD = ""  # the group of tests that have none


def _worker_group(item: pytest.Item) -> str:
    named = item.get_closest_marker("xdist_group")
    if named is not None:
        return str(named.args[0])
    if item.get_closest_marker("spread") is not None:
        return SPREAD
    return str(item.path.relative_to(item.config.rootpath))


def _start_order(item: pytest.Item) -> int:
    if item.path.relative_to(item.config.rootpath).parts[:2] == ("tests", "lab"):
        return 0
    if item.get_closest_marker("spread") is not None:
        return 3
    return 1 if any(item.get_closest_marker(m) for m in WAITING_MARKERS) else 2


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ran = sum(len(terminalreporter.stats.get(kind, []))
              for kind in ("passed", "failed", "xfailed", "xpassed"))
    skipped = len(terminalreporter.stats.get("skipped", []))
    terminalreporter.write_line(f"tests that ran: {ran} (skipped: {skipped})")
    # Where a test that records ("screenshots", folder) left them (test_layout.py: each page
    # at 390 px).
    stats = terminalreporter.stats
    for report in [r for kind in ("passed", "failed") for r in stats.get(kind, [])]:
        for name, value in getattr(report, "user_properties", ()):
            if name == "screenshots" and report.when == "call":
                terminalreporter.write_line(f"screenshots of {report.nodeid}: {value}")


@pytest.fixture(autouse=True)
def short_live_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live streams end after their first event: a test client reads a response to its end.
    The stream tests set their own timing."""
    monkeypatch.setattr(live, "TIMING", live.Timing(lifetime_seconds=0))


@pytest.fixture(autouse=True)
def root_logging_restored() -> Iterator[None]:
    """A `portal` command run in-process points the root logger at the stderr of its test,
    which pytest closes afterwards: later tests' background threads would log into it."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if h.get_name() == logs.HANDLER_NAME]:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def signals_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """A `portal` command run in-process installs its own SIGINT and SIGTERM handlers; what a
    test leaves changed (handlers, or the signal mask, which children inherit) is put back, so
    that later tests' subprocesses start with pytest's defaults."""
    watched = (signal.SIGINT, signal.SIGTERM)
    handlers = {number: signal.getsignal(number) for number in watched}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    changed = [signal.Signals(n).name for n, h in handlers.items() if signal.getsignal(n) != h]
    for number in watched:
        signal.signal(number, handlers[number])
    if signal.pthread_sigmask(signal.SIG_SETMASK, mask) != mask:
        changed.append("the signal mask")
    if changed:
        warnings.warn(f"{request.node.nodeid} left {', '.join(changed)} changed; restored",
                      stacklevel=1)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database migrated to head once per run; tests get transactions in it or clones of it."""
    name = postgres.unique_name("gtp_tpl")
    postgres.create_database(name)
    migrate.upgrade(postgres.sqlalchemy_url(name))
    yield name
    postgres.drop_database(name)


@pytest.fixture(scope="session")
def pg_engine_database(pg_template: str) -> Iterator[Database]:
    # Every clone of the template (``own_pg_database``) ends its connections: check each one
    # before use, not only those idle a while as the app does.
    database = Database(postgres.sqlalchemy_url(pg_template), pool_pre_ping=True)
    yield database
    database.dispose()


@pytest.fixture
def database(pg_engine_database: Database) -> Iterator[Database]:
    """The app's database inside one outer transaction, rolled back after the test."""
    with postgres.rolled_back(pg_engine_database.engine) as database:
        yield database


@pytest.fixture
def db(database: Database) -> Iterator[Session]:
    with database.session() as session:
        yield session


@pytest.fixture
def own_pg_database(pg_template: str) -> Iterator[Database]:
    """A real, separately committed database for tests that need many connections."""
    with postgres.cloned_database(pg_template, "gtp_own", pool_size=20,
                                  max_overflow=40) as database:
        yield database


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite file migrated with Alembic once per worker; tests get copies of it."""
    path = tmp_path_factory.mktemp("sqlite-template") / "portal.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_database(sqlite_template: Path, tmp_path: Path) -> Iterator[Database]:
    """The embedded default: a copy of an SQLite file migrated with Alembic."""
    path = tmp_path / "portal.db"
    shutil.copyfile(sqlite_template, path)
    database = Database(f"sqlite:///{path}")
    yield database
    database.dispose()


@pytest.fixture(scope="session")
def oidc_issuer() -> Iterator[str]:
    with local_oidc_provider(demo_users(ADMIN_GROUP)) as issuer:
        yield issuer


@pytest.fixture
def settings(oidc_issuer: str) -> Settings:
    return Settings(env="test", database_url="sqlite://", oidc_issuer=oidc_issuer,
                    oidc_admin_group=ADMIN_GROUP)


@pytest.fixture
def client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database)) as test_client:
        yield test_client


# ----- real Kubernetes API servers (one of each per run)


@pytest.fixture(scope="session")
def kube_assets_dir() -> Path:
    """The envtest binaries; without them the real-server tests skip, except in CI."""
    assets = kube_assets()
    if assets is None:
        skip_unless_ci(MISSING)
    return assets


def _served(assets: Path, name: str, *, controllers: bool) -> Iterator[ApiServer]:
    # etcd fsyncs every write: a RAM-backed folder keeps the suite fast where there is one.
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None  # noqa: S108 - private mkdtemp
    server = ApiServer(assets, Path(tempfile.mkdtemp(prefix=f"kube-{name}-", dir=base)),
                       name=name, controllers=controllers)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def host_api(kube_assets_dir: Path) -> Iterator[ApiServer]:
    """The host GPU cluster's API: etcd, kube-apiserver and the controller-manager."""
    yield from _served(kube_assets_dir, "host", controllers=True)


@pytest.fixture(scope="session")
def kai_host(host_api: ApiServer) -> ApiServer:
    """The host with KAI Scheduler's Queue CRD installed, as KAI's chart would."""
    return _with_kai_queue_crd(host_api)


def _with_kai_queue_crd(server: ApiServer) -> ApiServer:
    adapter = server.adapter()
    try:
        install_crds(adapter, KAI_QUEUE_CRD)
    finally:
        adapter.close()
    return server


@pytest.fixture(scope="session")
def host_admin(kai_host: ApiServer) -> Iterator[KubernetesAdapter]:
    """The host's API with admin rights, to look at and clean up what the portal made."""
    adapter = kai_host.adapter()
    yield adapter
    adapter.close()


@pytest.fixture(scope="session")
def portal_namespace(host_admin: KubernetesAdapter) -> Iterator[str]:
    """The portal's namespace on the host, as the Kustomize base makes it (its worker Role is
    there). Other tests of the run (the webhook's) use the same name, so one that was there is
    left as it was; made here, it stays for the run (deleting takes the controller-manager a
    while)."""
    existed = host_admin.get("v1", "Namespace", PORTAL_NAMESPACE) is not None
    if not existed:
        host_admin.apply({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": PORTAL_NAMESPACE}})
    yield PORTAL_NAMESPACE
    if not existed:
        host_admin.delete("v1", "Namespace", PORTAL_NAMESPACE)


@pytest.fixture(scope="session")
def us_api(kube_assets_dir: Path) -> Iterator[ApiServer]:
    """A second host cluster's API (host ``us`` of the multi-host tests): etcd and
    kube-apiserver of its own, no controller-manager, KAI's Queue CRD. A test that stops its
    API server starts it again."""
    for server in _served(kube_assets_dir, "us", controllers=False):
        yield _with_kai_queue_crd(server)


@pytest.fixture(scope="session")
def bare_api(kube_assets_dir: Path) -> Iterator[ApiServer]:
    """An API server no test installs CRDs or webhooks into for others to see: a cluster as
    it comes (tests that add something here take it away again)."""
    yield from _served(kube_assets_dir, "bare", controllers=False)


@pytest.fixture(scope="session")
def virtual_api(kube_assets_dir: Path) -> Iterator[ApiServer]:
    """A second control plane standing in for a virtual cluster's. It runs the controllers too,
    as vCluster does: the built-in ``view`` and ``edit`` roles are aggregated by one of them."""
    yield from _served(kube_assets_dir, "virtual", controllers=True)


@pytest.fixture(scope="session")
def virtual(virtual_api: ApiServer) -> Iterator[KubernetesAdapter]:
    """The virtual cluster's API with admin rights, to look at what the portal made."""
    adapter = virtual_api.adapter()
    yield adapter
    adapter.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless Chromium, one for the run: Playwright's sync API allows one per thread, and
    both tests/browser and tests/portalctl (the browser login) drive it."""
    with chromium.launched() as launched:
        yield launched


@pytest.fixture
def world(db: Session) -> World:
    """Two tenants, every role and a platform admin (tests/authz/world.py), committed so that
    requests through the app see it."""
    world = build_world(db)
    db.commit()
    return world
