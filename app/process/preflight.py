"""What a ``portal`` command checks before it starts: settings that load (and the logging they
configure), a migrated database, and what it refuses to run (the simulated host outside
``portal dev``, demo sign-in in production); each refusal is one line on stderr and exit 2."""

from __future__ import annotations

import typer

from app.database import migrate
from app.kit.config import Settings, get_settings
from app.kit.logs import configure_logging


def settings_or_exit() -> Settings:
    try:
        settings = get_settings()
    except ValueError as error:
        typer.echo(f"configuration error: {error}", err=True)
        raise typer.Exit(2) from error
    configure_logging(settings.log_level)
    return settings


def require_migrated(settings: Settings) -> None:
    """For a command that needs the schema: a database that is missing or behind is one line
    saying what to run, not a traceback (and no empty SQLite file left behind)."""
    if not migrate.is_migrated(settings.database_url):
        typer.echo(f"error: the database {migrate.displayed(settings.database_url)} is missing "
                   "or not migrated: run `portal db upgrade` (or `portal dev`, which migrates "
                   "it) with the same PORTAL_DATABASE_URL", err=True)
        raise typer.Exit(2)


def migrated_settings() -> Settings:
    settings = settings_or_exit()
    require_migrated(settings)
    return settings


def refuse_simulated_host(settings: Settings) -> None:
    # The simulated host lives in one process's memory: web and worker must share it.
    if settings.simulated_host:
        typer.echo("error: PORTAL_SIMULATED_HOST needs web and worker in one process: use "
                   "`portal dev`", err=True)
        raise typer.Exit(2)


def refuse_in_production(settings: Settings, command: str, why: str) -> None:
    if settings.env == "production":
        typer.echo(f"error: {command} {why}; it is refused when PORTAL_ENV=production",
                   err=True)
        raise typer.Exit(2)
