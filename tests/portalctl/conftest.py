"""portalctl against the real app served by uvicorn on loopback, on a committed PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from app.auth.models import User
from app.database.core import Database
from app.hosts.models import HostCluster
from app.kit.config import Settings
from app.portalctl.main import app
from tests import factories
from tests.support import oidc
from tests.support.kube import InMemoryConnector
from tests.support.principals import bearer
from tests.support.serving import serving
from tests.support.tenancy import build_tenancy
from tests.support.virtual_clusters import ready_cluster

ACME_H100_QUOTA = 16


@dataclass
class Portal:
    url: str
    database: Database
    h100_id: int
    tokens: dict[str, str]  # who -> API token secret
    h100_product: str = ""
    host_cluster: str = ""


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def portal(settings: Settings, own_pg_database: Database) -> Iterator[Portal]:
    yield from _serve(settings, own_pg_database)


@pytest.fixture
def portal_with_ready_cluster(settings: Settings, own_pg_database: Database) -> Iterator[Portal]:
    """acme has a Ready cluster ``train``; its virtual API is the in-memory fake."""
    yield from _serve(settings, own_pg_database, ready_cluster_name="train")


def _serve(settings: Settings, database: Database, *,
           ready_cluster_name: str | None = None) -> Iterator[Portal]:
    with database.transaction() as db:
        tenancy = build_tenancy(db)
        factories.quota(db, tenancy.acme, tenancy.h100, ACME_H100_QUOTA)
        if ready_cluster_name:
            ready_cluster(db, tenancy.acme, name=ready_cluster_name)
        users = {"acme-admin": tenancy.acme_admin, "globex-admin": tenancy.globex_admin,
                 "platform-admin": tenancy.platform_admin}
        tokens = {who: bearer(db, user)["Authorization"][7:] for who, user in users.items()}
        tokens["acme-viewer"] = bearer(db, tenancy.acme_viewer, "read")["Authorization"][7:]
        h100_id, h100_product = tenancy.h100.id, tenancy.h100.product
        host_cluster = db.scalars(select(HostCluster.name).order_by(HostCluster.id)).first() or ""
    database_settings = settings.model_copy(update={"database_url": database.url})
    with serving(database_settings, database, InMemoryConnector()) as url:
        yield Portal(url=url, database=database, h100_id=h100_id, tokens=tokens,
                     h100_product=h100_product, host_cluster=host_cluster)


@pytest.fixture
def portalctl(tmp_path: Path) -> PortalCtl:
    return PortalCtl(tmp_path / "home")


class PortalCtl:
    """Runs portalctl in-process with HOME and XDG_CONFIG_HOME in a temporary folder."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env: dict[str, str | None] = {
            "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "PORTALCTL_PROFILE": None, "PORTALCTL_TENANT": None}

    def __call__(self, *args: str, stdin: str | None = None) -> Result:
        result = CliRunner().invoke(app, list(args), input=stdin, env=self.env)
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Result(result.exit_code, result.stdout, result.stderr)

    def login(self, portal: Portal, who: str, *more: str) -> Result:
        return self("login", "--url", portal.url, "--token-stdin", *more,
                    stdin=portal.tokens[who] + "\n")


PORTALCTL = Path(sys.executable).parent / "portalctl"


@dataclass
class BrowserLogin:
    """``portalctl login`` waiting in a process of its own, and the link it printed."""

    process: subprocess.Popen[str]
    link: str
    terminal: int  # our end of the pseudo-terminal that is its standard input

    def finish(self) -> Result:
        try:
            stdout, stderr = self.process.communicate(timeout=60)
        finally:
            os.close(self.terminal)
        return Result(self.process.returncode, stdout, stderr)


def start_browser_login(portalctl: PortalCtl, url: str, *args: str,
                        env: dict[str, str] | None = None,
                        options: tuple[str, ...] = ()) -> BrowserLogin:
    """Runs the installed script as a terminal would (its standard input a pseudo-terminal),
    with no display: it prints the link. ``options`` go before ``login`` (``--profile P``)."""
    environment = {"PATH": os.environ.get("PATH", ""),
                   "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                   **{k: v for k, v in portalctl.env.items() if v is not None}, **(env or {})}
    ours, its = os.openpty()
    process = subprocess.Popen([str(PORTALCTL), *options, "login", "--url", url, *args],
                               env=environment, stdin=its, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    os.close(its)
    assert process.stderr is not None
    printed = []
    for line in process.stderr:
        printed.append(line)
        if line.startswith("  http"):
            return BrowserLogin(process, line.strip(), ours)
    process.wait()
    os.close(ours)
    raise AssertionError(f"portalctl printed no link: {''.join(printed)}")


def sso_user(portal: Portal, issuer: str, email: str) -> None:
    """The user ``email`` of the tenancy signs in at the local provider as ``email``."""
    oidc.register_user(issuer, email)
    with portal.database.transaction() as db:
        db.execute(update(User).where(User.email == email).values(issuer=issuer, subject=email))
