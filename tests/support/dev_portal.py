"""What `portal dev` wires: in-process (``running_dev_portal``: the demo SQLite file, the
simulated host coming up at once, the web app and the whole worker, every kind, sharing it,
driven pass by pass) or served on loopback with its worker running
(``serving_simulated_portal``: what `make run` is, for the browser and portalctl)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from app.auth import service as auth_service
from app.database import migrate
from app.database.core import Database, utcnow
from app.kit.config import Settings
from app.kube.helm import SimulatedInstaller
from app.kube.simulated import SimulatedHost
from app.process.asgi import create_app
from app.process.devmode import (
    DEMO_ADMIN,
    DEMO_MEMBER,
    DEMO_TENANT_ADMIN,
    dev_settings,
    seed_demo,
    simulated_host_for,
)
from app.process.worker import build_worker
from app.reconcilers.runtime import Runtime
from tests.support.serving import serving


@dataclass
class DevPortal:
    client: TestClient
    worker: Runtime
    simulation: SimulatedHost
    tokens: dict[str, str]
    settings: Settings
    database: Database

    def as_user(self, email: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[email]}"}

    def converge(self, passes: int = 6) -> None:
        for _ in range(passes):
            self.worker.run_pass()


@contextmanager
def running_dev_portal(tmp_path: Path, settings: Settings, *, startup_seconds: float = 0.0,
                       worker_poll_seconds: float | None = None) -> Iterator[DevPortal]:
    """``startup_seconds``: how long a control plane takes to boot (a Metal3 step, half);
    ``worker_poll_seconds`` the worker's, when it is run (``Runtime.run``) rather than
    driven pass by pass."""
    url = f"sqlite:///{tmp_path / 'portal-dev.db'}"
    update: dict[str, object] = {"simulated_startup_seconds": startup_seconds}
    if worker_poll_seconds is not None:
        update["worker_poll_seconds"] = worker_poll_seconds
    base = settings.model_copy(update=update)
    simulation = simulated_host_for(base, simulate=True)
    assert simulation is not None
    dev = dev_settings(base, database_url=url, issuer=str(settings.oidc_issuer), simulated=True)
    migrate.upgrade(url)
    database = Database(url)
    tokens = {}
    with database.transaction() as db:
        seed_demo(db)
        for email, scopes in ((DEMO_ADMIN, ["admin", "write", "read"]),
                              (DEMO_TENANT_ADMIN, ["write", "read"]),
                              (DEMO_MEMBER, ["write", "read"])):
            user = auth_service.user_for_email(db, email)
            if email == DEMO_ADMIN:
                auth_service.grant_platform_admin(db, email, actor_label="test")
            _token, tokens[email] = auth_service.issue_api_token(
                db, user, name="test", scopes=scopes, expires_at=utcnow() + timedelta(hours=1),
                actor_label="test")
    worker = build_worker(dev, database, simulation, SimulatedInstaller(simulation))
    with TestClient(create_app(dev, database, simulation)) as client:
        yield DevPortal(client, worker, simulation, tokens, dev, database)
    database.dispose()


def demo_database(directory: Path) -> Database:
    """The embedded default as `portal dev` makes it: an SQLite file with the demo data."""
    url = f"sqlite:///{directory / 'portal.db'}"
    migrate.upgrade(url)
    database = Database(url)
    with database.transaction() as db:
        seed_demo(db)
    return database


@dataclass(frozen=True)
class SimulatedPortal:
    url: str
    database: Database


@contextmanager
def serving_simulated_portal(tmp_path: Path, settings: Settings) -> Iterator[SimulatedPortal]:
    """`portal dev` as a newcomer runs it: the demo SQLite file on the simulated host, served
    on loopback with the worker converging; a virtual cluster comes up in a few seconds (a
    Metal3 step in half that)."""
    database = demo_database(tmp_path)
    base = settings.model_copy(update={"simulated_startup_seconds": 3.0,
                                       "worker_poll_seconds": 0.2})
    simulation = simulated_host_for(base, simulate=True)
    assert simulation is not None
    dev = dev_settings(base, database_url=database.url, issuer=str(settings.oidc_issuer),
                       simulated=True)
    with serving(dev, database, simulation, with_worker=True,
                 installer=SimulatedInstaller(simulation)) as url:
        yield SimulatedPortal(url, database)
    database.dispose()
