"""docker-compose.yml: valid Compose, the services an operator starts, secrets only from .env.

The schema is the Compose Specification's own, read from ../shared/reference. ``docker compose
config`` runs where the Compose plugin is installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.dockerfile import ROOT
from tests.support.paths import COMPOSE_SPEC_SCHEMA

COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
SCHEMA = COMPOSE_SPEC_SCHEMA
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
SECRET_NAME = re.compile(r"SECRET|PASSWORD|_KEY$|TOKEN")
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - what a container must listen on
PORTAL_SERVICES = ("migrate", "web", "worker", "webhook")
FILLED_SECRETS = {"POSTGRES_PASSWORD": "pg-pass-1", "PORTAL_SECRET_KEY": "s" * 48,
                  "PORTAL_ENCRYPTION_KEY": "k" * 43 + "=", "PORTAL_OIDC_CLIENT_SECRET": "c"}


def _raw() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def _env_example() -> dict[str, str]:
    pairs = (line.partition("=") for line in ENV_EXAMPLE.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {name.strip(): value.strip() for name, _, value in pairs}


class MissingVariable(Exception):
    pass


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}."""

    def substitute(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        value = env.get(name)
        empty = value is None or (value == "" and operator in {":-", ":?"})
        if operator in {"?", ":?"} and empty:
            raise MissingVariable(name)
        if operator in {"-", ":-"} and empty:
            return argument
        return value or ""

    return VARIABLE.sub(substitute, text)


def _resolved(env: dict[str, str]) -> dict[str, Any]:
    """The compose file as Compose reads it with ``env`` as its .env: interpolated, merged."""
    document = yaml.safe_load(_interpolate(COMPOSE.read_text(), env))
    assert isinstance(document, dict)
    return document


def _filled_env() -> dict[str, str]:
    return {**_env_example(), **FILLED_SECRETS}


def _services() -> dict[str, Any]:
    services = _resolved(_filled_env())["services"]
    assert isinstance(services, dict)
    return services


def test_the_compose_file_validates_against_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    for document in (_raw(), _resolved(_filled_env())):
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(document), key=str)
        assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_vendored_schema_is_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    assert schema["title"] == "Compose Specification"
    assert {"services", "volumes", "networks", "secrets"} <= set(schema["properties"])


def test_postgres_keeps_its_data_in_a_named_volume_and_reports_ready() -> None:
    db = _services()["db"]
    assert db["image"].startswith("postgres:15")
    volume, _, target = db["volumes"][0].partition(":")
    assert target == "/var/lib/postgresql/data" and volume in _raw()["volumes"]
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])


def test_postgres_admits_the_connections_of_web_on_16_cpus_four_workers_and_the_webhook(
        ) -> None:
    from app.kit.config import Settings
    from app.process.capacity import connections_per_process

    command = _services()["db"]["command"]
    admitted = int(next(arg.split("=")[1] for arg in command
                        if arg.startswith("max_connections="))) - 3  # superusers' reserve
    web = 16 * connections_per_process(Settings(web_workers=None))
    pools = 15 * (4 + 1)  # each worker's and the webhook's: SQLAlchemy's 5 + 10 overflow
    assert web + pools <= admitted


def test_migrations_run_once_after_the_database_is_healthy() -> None:
    migrate = _services()["migrate"]
    assert migrate["command"] == ["portal", "db", "upgrade"]
    assert migrate["depends_on"]["db"]["condition"] == "service_healthy"
    assert migrate.get("restart", "no") == "no"


@pytest.mark.parametrize("name", ["web", "worker", "webhook"])
def test_the_portal_processes_start_after_the_migrations_succeed(name: str) -> None:
    depends_on = _services()[name]["depends_on"]
    assert depends_on["migrate"]["condition"] == "service_completed_successfully"
    assert depends_on["db"]["condition"] == "service_healthy"


def test_web_serves_on_port_8000_and_is_health_checked_on_healthz() -> None:
    web = _services()["web"]
    assert web["command"][:4] == ["portal", "serve", "--host", ALL_INTERFACES]
    assert any(str(port).endswith(":8000") for port in web["ports"])
    assert "/healthz" in " ".join(web["healthcheck"]["test"])


def test_two_workers_run_side_by_side_and_nothing_stops_scaling_them() -> None:
    worker = _services()["worker"]
    assert worker["command"] == ["portal", "worker"]
    assert worker["deploy"]["replicas"] >= 2
    # A fixed container name or a host port would make a second replica fail to start.
    assert "container_name" not in worker and "ports" not in worker


def test_the_demo_sign_in_provider_is_development_only_and_loopback_only() -> None:
    services = _services()
    idp = services["idp"]
    assert idp["command"][:2] == ["portal", "dev-idp"]
    assert idp["environment"]["PORTAL_ENV"] == "development"
    assert all(str(port).startswith("127.0.0.1:") for port in idp["ports"])
    # The browser and the portal reach it at the one address the portal is told.
    issuer = services["web"]["environment"]["PORTAL_OIDC_ISSUER"]
    host = re.match(r"https?://([^:/]+)", issuer)
    assert host and host.group(1) in idp["networks"]["default"]["aliases"]


@pytest.mark.parametrize("name", PORTAL_SERVICES)
def test_the_host_kubeconfig_is_mounted_read_only(name: str) -> None:
    service = _services()[name]
    mounts = [v for v in service["volumes"] if str(v).split(":")[1] == "/etc/portal/kubeconfig"]
    assert len(mounts) == 1 and mounts[0].endswith(":ro")
    assert service["environment"]["PORTAL_KUBECONFIG"] == "/etc/portal/kubeconfig"


@pytest.mark.parametrize("name", PORTAL_SERVICES)
def test_the_portal_runs_in_production_mode_against_postgresql(name: str) -> None:
    environment = _services()[name]["environment"]
    assert environment["PORTAL_ENV"] == "production"
    assert environment["PORTAL_DATABASE_URL"].startswith("postgresql+psycopg://portal:pg-pass-1@db")


def test_no_secret_is_written_in_the_compose_file() -> None:
    raw = COMPOSE.read_text()
    seen = set()
    for match in re.finditer(r"^\s*([A-Z_]+):\s*(.+)$", raw, re.MULTILINE):
        name, value = match.groups()
        if SECRET_NAME.search(name):
            seen.add(name)
            # Only a required variable: no value, no default that would stand in for one.
            assert re.fullmatch(rf"\$\{{{name}:\?[^}}]*\}}", value.strip()), (name, value)
    assert {"POSTGRES_PASSWORD", "PORTAL_SECRET_KEY", "PORTAL_ENCRYPTION_KEY",
            "PORTAL_OIDC_CLIENT_SECRET"} <= seen
    url = re.search(r"PORTAL_DATABASE_URL:\s*(.+)", raw)
    assert url and re.search(r"://portal:\$\{POSTGRES_PASSWORD:\?[^}]*\}@", url.group(1))


def test_the_env_example_names_every_variable_the_compose_file_reads() -> None:
    referenced = set(VARIABLE.findall(COMPOSE.read_text()))
    missing = {name for name, _, _ in referenced} - set(_env_example())
    assert not missing


def test_the_env_example_ships_no_secret_and_compose_refuses_to_start_without_them() -> None:
    example = _env_example()
    secrets = {name for name in example if SECRET_NAME.search(name)}
    assert secrets == set(FILLED_SECRETS)
    assert all(example[name] == "" for name in secrets)
    with pytest.raises(MissingVariable):
        _resolved(example)
    for name in secrets:
        with pytest.raises(MissingVariable, match=name):
            _resolved({**_filled_env(), name: ""})


def _compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    version = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30,
                             check=False)
    return version.returncode == 0


@pytest.mark.skipif(not _compose_plugin(), reason="`docker compose` is not installed")
def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in _filled_env().items()))
    result = subprocess.run(
        ["docker", "compose", "--env-file", str(env_file), "--profile", "webhook",
         "-f", str(COMPOSE), "config", "--format", "json"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    assert {"db", "migrate", "web", "worker", "webhook", "idp"} <= set(services)
