"""The ``portal`` command: its subcommands, each a thin start of what it runs."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import uvicorn
from cryptography.fernet import Fernet

from app.auth import service as auth_service
from app.database import migrate
from app.database.core import Database, utcnow
from app.keys import service as keys_service
from app.kit.config import Settings
from app.kit.config_reference import configuration_reference
from app.kit.crypto import SecretBox
from app.kit.errors import ProblemError
from app.kit.metrics import registry_of
from app.kube.connector import real_host_configured
from app.process import quota_check
from app.process.balance import connection_shares
from app.process.business_metrics import BusinessGauges
from app.process.capacity import shortfall, web_time_limits, worker_time_limits
from app.process.devmode import (
    check_clusters_on_the_new_host,
    demo_users,
    dev_settings,
    local_oidc_provider,
    seed_demo,
    simulated_host_for,
)
from app.process.metrics import metrics_address, multiprocess_metrics
from app.process.preflight import (
    migrated_settings,
    refuse_in_production,
    refuse_simulated_host,
    require_migrated,
    settings_or_exit,
)
from app.process.serving import (
    UVICORN_OPTIONS,
    WORKER_HEALTHCHECK_S,
    serving_app,
    serving_processes,
)
from app.process.signals import stop_on_signals
from app.process.wiring import connect_hooks
from app.process.worker import build_worker

if TYPE_CHECKING:
    from app.lab.walk import Report


def _commands(help_text: str) -> typer.Typer:
    """Click's plain help layout, as portalctl's: Rich's table shows flags as ``<bool>`` and
    cuts long option names at 80 columns."""
    return typer.Typer(help=help_text, no_args_is_help=True, add_completion=False,
                       rich_markup_mode=None)


cli = _commands("GPU Tenant Portal")
db_cli = _commands("Database migrations")
users_cli = _commands("Users (operator bootstrap)")
tokens_cli = _commands("API tokens (operator bootstrap)")
keys_cli = _commands("Keys")
config_cli = _commands("Configuration")
cli.add_typer(db_cli, name="db")
cli.add_typer(users_cli, name="users")
cli.add_typer(tokens_cli, name="tokens")
cli.add_typer(keys_cli, name="keys")
cli.add_typer(config_cli, name="config")
log = logging.getLogger("portal")

quota_check.register(cli, migrated_settings)


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    workers: Annotated[int | None, typer.Option(
        min=1, help="processes serving requests (default: PORTAL_WEB_WORKERS, else the CPUs "
                    "this process may use; 1 on SQLite)")] = None,
) -> None:
    """Serve the web UI and the REST API."""
    settings = settings_or_exit()
    refuse_simulated_host(settings)
    require_migrated(settings)
    processes = workers or settings.web_workers or serving_processes(settings)
    warning = shortfall(settings, processes)
    if warning:
        log.warning("%s", warning)
    # The client address (failed API tokens are counted by it) comes from X-Forwarded-For
    # only when a trusted proxy sent it; anyone else's header is ignored.
    options = {**UVICORN_OPTIONS, "forwarded_allow_ips": settings.trusted_proxies,
               "timeout_graceful_shutdown": settings.web_shutdown_seconds}
    if processes == 1:
        app = serving_app(settings)
        with metrics_address(settings.metrics_address, app.state.metrics.registry):
            uvicorn.run(app, host=host, port=port, **options)
    else:
        with connection_shares(), multiprocess_metrics(processes), \
                metrics_address(settings.metrics_address):
            uvicorn.run("app.process.serving:serving_app", factory=True, workers=processes,
                        host=host, port=port, timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
                        **options)


@cli.command()
def worker() -> None:
    """Run the reconcile loop until SIGTERM or Ctrl-C."""
    settings = settings_or_exit()
    refuse_simulated_host(settings)
    require_migrated(settings)
    database = Database(settings.database_url, worker_time_limits(settings)).count_pool_as("worker")
    loop = build_worker(settings, database)
    stop_on_signals(loop.stop)
    business = registry_of(BusinessGauges(database, loop.kinds, settings=settings))
    with metrics_address(settings.worker_metrics_address, business):
        loop.run()


@cli.command()
def webhook(
    host: Annotated[str, typer.Option(help="address to listen on")] = "0.0.0.0",  # noqa: S104 - the API server calls in from outside the pod
    port: Annotated[int, typer.Option(help="HTTPS port to listen on")] = 9443,
    cert_dir: Annotated[Path | None, typer.Option(
        help="folder for the short-lived key files TLS loading needs (default: the temp dir)")
    ] = None,
) -> None:
    """Serve the admission webhook that puts shared-pool pods in their KAI queue."""
    from app.kube.connector import ClientConnector
    from app.kube.manifests.admission import WEBHOOK_PATH
    from app.webhook.server import WebhookServer, host_lookup

    settings = migrated_settings()
    connector = ClientConnector(settings)
    kube = connector.host()
    if kube is None:
        typer.echo("error: the webhook needs the host cluster (PORTAL_KUBECONFIG or in-cluster "
                   "config)", err=True)
        raise typer.Exit(2)
    # Reviews from other registered hosts name their host: its credentials are in the database.
    lookup = host_lookup(settings, Database(settings.database_url, web_time_limits(settings)),
                         connector)
    server = WebhookServer(kube, settings.webhook_namespace, address=host, port=port,
                           cert_dir=cert_dir, hosts=lookup)
    stopping = threading.Event()
    stop_on_signals(stopping.set)
    log.info("admission webhook on https://%s:%d%s", host, port, WEBHOOK_PATH)
    server.start()
    stopping.wait()
    server.stop()


@db_cli.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply migrations up to REVISION (default: head)."""
    settings = settings_or_exit()
    migrate.upgrade(settings.database_url, revision)
    typer.echo(f"database at {revision}")


@db_cli.command("downgrade")
def db_downgrade(revision: str) -> None:
    """Revert migrations down to REVISION (``base`` empties the database)."""
    settings = settings_or_exit()
    migrate.downgrade(settings.database_url, revision)
    typer.echo(f"database at {revision}")


@users_cli.command("make-admin")
def make_admin(email: str) -> None:
    """Make EMAIL a platform admin (the user record is created if needed)."""
    settings = migrated_settings()
    with Database(settings.database_url).transaction() as db:
        auth_service.grant_platform_admin(db, email, actor_label="cli")
    typer.echo(f"{email} is a platform admin", err=True)


_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text.strip())
    if not match:
        raise typer.BadParameter("use a number and a unit, such as 90m, 12h or 30d")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


@tokens_cli.command("create")
def create_token(
    email: str,
    scope: Annotated[list[str], typer.Option(help="read, write or admin; repeatable")],
    expires_in: Annotated[str, typer.Option(help="lifetime such as 12h or 30d")] = "30d",
    name: Annotated[str, typer.Option(help="a label to recognise the token")] = "cli",
) -> None:
    """Mint an API token for EMAIL and print it, alone, on stdout."""
    settings = migrated_settings()
    expires_at = utcnow() + parse_duration(expires_in)
    try:
        with Database(settings.database_url).transaction() as db:
            user = auth_service.user_for_email(db, email)
            _token, secret = auth_service.issue_api_token(
                db, user, name=name, scopes=scope, expires_at=expires_at, actor_label="cli"
            )
    except ProblemError as error:
        typer.echo(f"error: {error.detail}", err=True)
        raise typer.Exit(2) from error
    typer.echo(secret)


@keys_cli.command("generate")
def generate_key() -> None:
    """Print a fresh key for PORTAL_ENCRYPTION_KEY."""
    typer.echo(Fernet.generate_key().decode())


@keys_cli.command("rotate")
def rotate_keys(
    batch_size: Annotated[int, typer.Option(min=1, help="rows per transaction")] = (
        keys_service.DEFAULT_BATCH_SIZE),
) -> None:
    """Re-encrypt every stored credential with PORTAL_ENCRYPTION_KEY.

    Credentials sealed with a key in PORTAL_ENCRYPTION_OLD_KEYS are re-encrypted; running it
    again changes nothing. Exits 1 when some credential opens with none of the keys.
    """
    settings = migrated_settings()
    database = Database(settings.database_url)
    try:
        report = keys_service.rotate_stored_secrets(
            database, SecretBox.from_settings(settings), batch_size=batch_size)
    finally:
        database.dispose()
    typer.echo(f"re-encrypted: {report.reencrypted}, already current: "
               f"{report.already_current}, rewritten meanwhile by a worker: "
               f"{report.changed_meanwhile}, unreadable: {len(report.unreadable)}")
    if not report.complete:
        typer.echo("error: no configured key opens " + ", ".join(report.unreadable)
                   + "; add the key they were sealed with to PORTAL_ENCRYPTION_OLD_KEYS "
                   "and run it again (nothing else was lost)", err=True)
        raise typer.Exit(1)


@config_cli.command("reference")
def config_reference() -> None:
    """Print the configuration reference (the table in docs/operator.md)."""
    typer.echo(configuration_reference(), nl=False)


@cli.command()
def dev(
    port: Annotated[int, typer.Option(help="portal port")] = 8000,
    idp_port: Annotated[int, typer.Option(help="local OIDC provider port")] = 8900,
    database: Annotated[Path | None, typer.Option(
        help="SQLite file (default: PORTAL_DATABASE_URL, itself ./portal.db by default, the "
             "database every other command uses)")] = None,
    simulate: Annotated[bool, typer.Option(
        "--simulate/--no-simulate",
        help="simulate a host cluster with a demo GPU fleet (ignored with PORTAL_KUBECONFIG)")
    ] = True,
) -> None:
    """The embedded default: SQLite, a local OIDC provider with demo users, web and worker,
    on a simulated host cluster unless PORTAL_KUBECONFIG names a real one."""
    from app.kube.helm import SimulatedInstaller
    from app.process.asgi import create_app

    base = settings_or_exit()
    refuse_in_production(base, "portal dev", "signs in anyone as a demo user")
    url = f"sqlite:///{database.resolve()}" if database is not None else base.database_url
    simulation = simulated_host_for(base, simulate=simulate)
    installer = SimulatedInstaller(simulation) if simulation is not None else None
    with local_oidc_provider(demo_users(base.oidc_admin_group), port=idp_port) as issuer:
        settings = dev_settings(base, database_url=url, issuer=issuer,
                                simulated=simulation is not None)
        migrate.upgrade(url)
        store = Database(url)
        with store.transaction() as db:
            seed_demo(db)
            if simulation is not None:
                check_clusters_on_the_new_host(db)
        loop = build_worker(settings, store, simulation, installer)
        app = create_app(settings, store, simulation)
        business = registry_of(BusinessGauges(store, loop.kinds, settings=settings))
        worker_thread = threading.Thread(target=loop.run, name="worker", daemon=True)
        # As `portal serve` and `portal worker` apart: the web's address its app's requests
        # only, the worker's the business gauges and this process's reconciles, breakers and
        # helm installs (the worker runs here). The worker's only when named: its default
        # port is `portal worker`'s, which a `portal dev` beside it would take.
        named = "worker_metrics_address" in base.model_fields_set
        with metrics_address(settings.metrics_address, app.state.metrics.registry,
                             default=False), \
                metrics_address(settings.worker_metrics_address if named else None, business):
            worker_thread.start()
            typer.echo(f"GPU Tenant Portal: http://127.0.0.1:{port}  (sign-in provider {issuer})")
            typer.echo("demo users: admin@example.com (platform admin), alice@example.com "
                       "(admin of tenant 'demo'), bob@example.com (member). Ctrl-C stops.")
            typer.echo(_host_line(settings, simulation is not None))
            try:
                uvicorn.run(app, host="127.0.0.1", port=port, **UVICORN_OPTIONS)
            finally:
                loop.stop()
                worker_thread.join(10)
                store.dispose()


def _host_line(settings: Settings, simulated: bool) -> str:
    if simulated:
        return ("host cluster: SIMULATED in memory (a demo GPU fleet; virtual clusters come up "
                f"in {settings.simulated_startup_seconds:g}s; kubeconfigs cannot connect). "
                "--no-simulate turns it off; PORTAL_KUBECONFIG uses a real host.")
    if real_host_configured(settings):
        return "host cluster: the real one (PORTAL_KUBECONFIG or in-cluster config)"
    return "host cluster: none (clusters wait with HostClusterNotConfigured)"


@cli.command()
def lab(
    port: Annotated[int, typer.Option(help="portal port")] = 8000,
    idp_port: Annotated[int, typer.Option(help="local OIDC provider port")] = 8900,
    nodes: Annotated[Path, typer.Option(help="the host's GPU fleet, a NodeList (JSON)")] = Path(
        "app/devdata/host-nodes.json"),
) -> None:
    """A real GPU host on this machine (root): kube-apiserver, kwok's GPU fleet, KAI, vCluster
    control planes, and the portal on it. Needs `make tools`; Ctrl-C stops everything."""
    from app.lab.main import Lab, LabError, LabOptions

    refuse_in_production(settings_or_exit(), "portal lab", "signs in anyone as a demo user")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the lab's own probes, every 200 ms
    stopping = threading.Event()
    stop_on_signals(stopping.set)
    try:
        with Lab(LabOptions(port=port, idp_port=idp_port, nodes=nodes)).running() as running:
            typer.echo(running.summary())
            stopping.wait()
            typer.echo("stopping the lab...")
    except LabError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error


@cli.command("lab-demo")
def lab_demo(
    lab: Annotated[Path, typer.Option(help="the running lab's folder")] = Path(".lab"),
) -> None:
    """The three teams on a running lab (`portal lab`): quota, clusters, kubeconfigs, GPU pods
    applied with kubectl, then checks from outside the portal; then a fourth team on private
    nodes (two spare machines of the lab). Exits 1 if any check fails."""
    from app.lab import private_demo

    _run_lab_walk(lab, private_demo.with_three_teams)


@cli.command("lab-reclaim")
def lab_reclaim(
    lab: Annotated[Path, typer.Option(help="the running lab's folder")] = Path(".lab"),
) -> None:
    """Guaranteed and burst GPUs on a running lab: one tenant bursts onto a pool of 8, the
    pool's other owner comes back, KAI reclaims the borrowed GPUs. Exits 1 if a check fails."""
    from app.lab import reclaim

    _run_lab_walk(lab, reclaim.run)


@cli.command("lab-sleep")
def lab_sleep(
    lab: Annotated[Path, typer.Option(help="the running lab's folder")] = Path(".lab"),
) -> None:
    """Sleep on idle, wake on `portalctl kubeconfig`, deletion after days asleep, on a running
    lab (its sleep policies run 2880 times faster). Exits 1 if a check fails."""
    from app.lab import sleeping

    _run_lab_walk(lab, sleeping.run)


@cli.command("lab-idle")
def lab_idle(
    lab: Annotated[Path, typer.Option(help="the running lab's folder")] = Path(".lab"),
) -> None:
    """Idle GPUs on a running lab, through its Prometheus and played DCGM exporter: a busy team's
    utilisation shown within two scrapes, an idle team flagged after the 1-minute window and put
    to sleep by a policy idle on utilisation, its GPUs bound to a third team's waiting pods.
    Exits 1 if a check fails."""
    from app.lab import idle_walk

    _run_lab_walk(lab, idle_walk.run)


@cli.command("lab-slices")
def lab_slices(
    lab: Annotated[Path, typer.Option(help="the running lab's folder")] = Path(".lab"),
) -> None:
    """Less than a GPU on a running lab: a team granted 3 x 1g.10gb runs three pods on MIG
    slices while a fourth waits with its reason, a team granted 0.5 of an H100 runs two 0.25
    pods on one GPU bound by KAI's binder while larger asks wait, and the ledger counts
    slice-hours and fractional GPU-hours. Exits 1 if a check fails."""
    from app.lab import slices

    _run_lab_walk(lab, slices.run)


def _run_lab_walk(lab: Path, walk: Callable[[dict[str, str], Path], Report]) -> None:
    from app.lab import demo

    if not (lab / "env").is_file():
        typer.echo(f"error: no lab at {lab} (no {lab / 'env'}): start one with `make lab`",
                   err=True)
        raise typer.Exit(2)
    report = walk(demo.read_env(lab / "env"), lab / "kubeconfigs")
    failed = report.failures()
    typer.echo(f"{len(report.checks) - len(failed)} of {len(report.checks)} checks passed")
    if failed:
        raise typer.Exit(1)


@cli.command("dev-idp")
def dev_idp(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 9400,
) -> None:
    """Development only: the local OIDC provider with the demo users, and nothing else."""
    settings = settings_or_exit()
    refuse_in_production(settings, "dev-idp", "signs in anyone as a demo user")
    stopping = threading.Event()
    stop_on_signals(stopping.set)
    with local_oidc_provider(demo_users(settings.oidc_admin_group), host=host, port=port) as url:
        typer.echo(f"local OIDC provider (development only) on {url}; demo users: "
                   "admin@example.com (platform admin), alice@example.com, bob@example.com")
        stopping.wait()


def main() -> None:
    connect_hooks()
    cli()


if __name__ == "__main__":
    main()
