"""Settings read from the environment (prefix ``PORTAL_``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_SECRET_KEY = "dev-only-secret-key-change-me"  # noqa: S105 - a marker, refused in production
# A valid Fernet key that is public on purpose: only for development, refused in production.
DEV_ENCRYPTION_KEY = "ZGV2LW9ubHktZW5jcnlwdGlvbi1rZXktMzItYnl0ZXM="


class InsecureProductionConfig(ValueError):
    """Production was asked for with a development secret or key."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PORTAL_", extra="ignore")

    env: Literal["development", "production", "test"] = "development"
    database_url: str = Field(
        default_factory=lambda: f"sqlite:///{Path.cwd() / 'portal.db'}",
        description="SQLAlchemy URL; PostgreSQL via postgresql+psycopg://",
    )
    secret_key: str = DEV_SECRET_KEY
    encryption_key: str = DEV_ENCRYPTION_KEY
    base_url: str | None = None

    oidc_issuer: str | None = None
    oidc_client_id: str = "gpu-tenant-portal"
    oidc_client_secret: str = "dev-client-secret"  # noqa: S105 - the local provider accepts any
    oidc_admin_group: str = "platform-admins"
    oidc_groups_claim: str = "groups"
    oidc_scopes: str = "openid email profile"

    # Threads for sync endpoints, and as many database connections (+ a few for the rest).
    web_threads: int = Field(default=8, ge=1, le=200)
    # Requests in flight past which the portal answers 503 + Retry-After at once; below it, the
    # ones waiting for a thread form a bounded queue (shedding early only feeds retry loops).
    web_max_in_flight: int = Field(default=256, ge=1)
    # How long another replica may still honour a revoked token or a removed membership; 0: off.
    auth_cache_seconds: float = Field(default=5.0, ge=0, le=60)

    session_idle_minutes: int = 60
    session_absolute_hours: int = 12

    kubeconfig: str | None = None
    kube_qps: float = 20.0
    kube_burst: int = 40
    rack_label: str = "network.topology.example.com/rack"
    pod_security: Literal["restricted", "baseline"] = "restricted"
    # MAJOR.MINOR.PATCH (the vCluster image tag); the first is the default for new clusters.
    kubernetes_versions: list[str] = ["1.32.4", "1.31.8", "1.30.12"]
    # Where tenants reach a virtual cluster's API server (exportKubeConfig.server).
    cluster_endpoint_template: str = "https://{cluster}.{tenant}.vc.example.com"
    helm_binary: str = "helm"
    vcluster_chart_repo: str = "https://charts.loft.sh"
    vcluster_chart_version: str = "0.30.0"
    # The vCluster build the host runs: "oss" never gets a Pro-only value (translate patches, ...).
    vcluster_edition: Literal["oss", "pro"] = "oss"
    kubeconfig_default_hours: float = 8.0
    kubeconfig_max_hours: float = 24.0

    # The shared-pool admission webhook (`portal webhook`) and where the worker registers it.
    webhook_namespace: str = "gpu-tenant-portal"
    webhook_service_name: str = "gpu-tenant-portal-webhook"
    # Set for a webhook outside the cluster; the API server then calls this https URL.
    webhook_url: str | None = Field(default=None, pattern=r"^https://")
    # Names in the serving certificate; empty: the URL's host, else the Service's DNS names.
    webhook_hosts: list[str] = []
    webhook_certificate_days: int = Field(default=90, ge=3)

    worker_poll_seconds: float = 2.0
    worker_resync_seconds: float = 300.0
    # Short, and renewed by a heartbeat while a worker holds it (helm included): a crashed
    # worker's clusters are taken up by another within about this long.
    worker_lease_seconds: float = Field(default=30.0, ge=3.0)
    # Clusters one worker reconciles at once; every Kubernetes call still shares one
    # PORTAL_KUBE_QPS/BURST limit. Keep it below the database pool (15 connections).
    worker_concurrency: int = Field(default=8, ge=1, le=64)

    log_level: str = "INFO"

    @model_validator(mode="after")
    def _refuse_development_secrets_in_production(self) -> Settings:
        if self.env != "production":
            return self
        if self.secret_key == DEV_SECRET_KEY:
            raise InsecureProductionConfig(
                "PORTAL_SECRET_KEY is the development default; set a random secret"
            )
        if self.encryption_key == DEV_ENCRYPTION_KEY:
            raise InsecureProductionConfig(
                "PORTAL_ENCRYPTION_KEY is the development default; "
                "generate one with `portal keys generate`"
            )
        if not self.oidc_issuer:
            raise InsecureProductionConfig("PORTAL_OIDC_ISSUER must be set in production")
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@lru_cache
def get_settings() -> Settings:
    return Settings()
