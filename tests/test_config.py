"""Settings from the environment; production refuses development secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pydantic import ValidationError

from app.kit.config import DEV_ENCRYPTION_KEY, InsecureProductionConfig, Settings

POSTGRES_URL = "postgresql+psycopg://portal@db.example.com/portal"


def test_the_default_database_is_an_sqlite_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PORTAL_DATABASE_URL", raising=False)
    assert Settings().database_url == f"sqlite:///{tmp_path / 'portal.db'}"


def test_settings_are_read_with_the_portal_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORTAL_OIDC_ISSUER", "https://idp.example.com")
    monkeypatch.setenv("PORTAL_OIDC_ADMIN_GROUP", "gpu-admins")
    settings = Settings()
    assert (settings.oidc_issuer, settings.oidc_admin_group) == (
        "https://idp.example.com", "gpu-admins")


def test_the_vcluster_edition_is_open_source_unless_pro_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PORTAL_VCLUSTER_EDITION", raising=False)
    assert Settings().vcluster_edition == "oss"
    monkeypatch.setenv("PORTAL_VCLUSTER_EDITION", "pro")
    assert Settings().vcluster_edition == "pro"
    monkeypatch.setenv("PORTAL_VCLUSTER_EDITION", "enterprise")
    with pytest.raises(ValidationError, match="vcluster_edition"):
        Settings()


def _production(**overrides: str) -> Settings:
    values = {"env": "production", "secret_key": "s" * 40,
              "encryption_key": Fernet.generate_key().decode(),
              "oidc_issuer": "https://idp.example.com", "database_url": POSTGRES_URL}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def test_production_starts_with_real_secrets() -> None:
    assert _production().env == "production"


@pytest.mark.parametrize(
    ("field", "message"),
    [("secret_key", "PORTAL_SECRET_KEY"), ("encryption_key", "PORTAL_ENCRYPTION_KEY")],
)
def test_production_refuses_development_defaults(field: str, message: str) -> None:
    defaults = Settings()
    with pytest.raises(ValueError, match=message):
        _production(**{field: getattr(defaults, field)})


def test_production_needs_an_identity_provider() -> None:
    with pytest.raises(ValueError, match="PORTAL_OIDC_ISSUER"):
        _production(oidc_issuer="")


def test_production_refuses_the_simulated_host() -> None:
    with pytest.raises(ValueError, match="PORTAL_SIMULATED_HOST is for development only"):
        _production(simulated_host="true")


def test_the_refusal_is_its_own_error_type() -> None:
    assert issubclass(InsecureProductionConfig, ValueError)


@pytest.mark.parametrize("url", ["sqlite:///srv/portal.db", "sqlite://", "sqlite+pysqlite:///x.db"])
def test_production_refuses_sqlite(url: str) -> None:
    with pytest.raises(ValueError, match="PORTAL_DATABASE_URL is SQLite"):
        _production(database_url=url)


def test_production_refuses_the_default_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PORTAL_DATABASE_URL", raising=False)
    with pytest.raises(ValueError, match="PORTAL_DATABASE_URL"):
        Settings(env="production", secret_key="s" * 40,
                 encryption_key=Fernet.generate_key().decode(),
                 oidc_issuer="https://idp.example.com")


def test_development_and_test_modes_keep_sqlite_and_the_defaults() -> None:
    for env in ("development", "test"):
        settings = Settings(env=env, database_url="sqlite://")
        assert settings.is_sqlite and settings.encryption_key == DEV_ENCRYPTION_KEY


def test_production_refuses_the_development_key_among_the_old_keys() -> None:
    with pytest.raises(ValueError, match="PORTAL_ENCRYPTION_OLD_KEYS"):
        _production(encryption_old_keys=[Fernet.generate_key().decode(),  # type: ignore[arg-type]
                                         DEV_ENCRYPTION_KEY])


def test_production_accepts_real_old_keys() -> None:
    old = Fernet.generate_key().decode()
    assert _production(encryption_old_keys=[old]).encryption_old_keys == [old]  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", ["{0},{1}", " {0} , {1} ,", '["{0}", "{1}"]'])
def test_old_keys_are_read_comma_separated_or_as_a_json_list(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv("PORTAL_ENCRYPTION_OLD_KEYS", shape.format(first, second))
    assert Settings().encryption_old_keys == [first, second]


def test_no_old_keys_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PORTAL_ENCRYPTION_OLD_KEYS", raising=False)
    assert Settings().encryption_old_keys == []


def test_an_old_key_that_is_not_a_fernet_key_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORTAL_ENCRYPTION_OLD_KEYS", f"{Fernet.generate_key().decode()},oops")
    with pytest.raises(ValidationError, match="key 2 is not a Fernet key"):
        Settings()


@pytest.mark.parametrize(("url", "refusal"), [
    ("prometheus:9090", "must start with http:// or https://"),
    ("http://user:secret@prometheus:9090", "must not carry a user name or password"),
    ("http://prometheus:9090/api/v1/query", "must be the base address"),
    ("http://prometheus:9090/?x=1", "must not carry a query"),
    ("http://:9090", "names no host"),
])
def test_a_prometheus_address_the_portal_could_not_query_is_refused_at_start(
        url: str, refusal: str) -> None:
    with pytest.raises(ValidationError, match=refusal):
        Settings(prometheus_url=url)


def test_a_prometheus_address_may_carry_a_path_prefix_and_empty_means_unset() -> None:
    assert Settings(prometheus_url="https://mon.example.com/prometheus").prometheus_url
    assert Settings(prometheus_url="").prometheus_url is None
