"""Settings read from the environment (prefix ``PORTAL_``)."""

from __future__ import annotations

import ipaddress
import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from cryptography.fernet import Fernet
from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from app.kit.notify_settings import NotifySettings
from app.kit.prometheus_address import prometheus_url_problem
from app.kit.webhook_address import webhook_url_problem

DEV_SECRET_KEY = "dev-only-secret-key-change-me"  # noqa: S105 - a marker, refused in production
# A valid Fernet key that is public on purpose: only for development, refused in production.
DEV_ENCRYPTION_KEY = "ZGV2LW9ubHktZW5jcnlwdGlvbi1rZXktMzItYnl0ZXM="
ENV_PREFIX = "PORTAL_"


class InsecureProductionConfig(ValueError):
    """Production was asked for with a development secret or key."""


class Settings(NotifySettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    env: Literal["development", "production", "test"] = Field(
        default="development",
        description="`production` refuses to start with a development secret or key, without "
                    "an IdP, or on SQLite")
    database_url: str = Field(
        default_factory=lambda: f"sqlite:///{Path.cwd() / 'portal.db'}",
        description="SQLAlchemy URL; PostgreSQL as `postgresql+psycopg://user:pass@host/db` "
                    "(required in production)")
    secret_key: str = Field(
        default=DEV_SECRET_KEY,
        description="signs session-bound values; set a long random string")
    encryption_key: str = Field(
        default=DEV_ENCRYPTION_KEY,
        description="Fernet key encrypting stored cluster credentials (`portal keys generate`)")
    # Decrypt only: keys being rotated out. Comma-separated or a JSON list.
    encryption_old_keys: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="previous encryption keys, comma-separated or a JSON list; stored "
                    "credentials sealed with them still open until `portal keys rotate` "
                    "re-encrypts them with `PORTAL_ENCRYPTION_KEY`")
    base_url: str | None = Field(
        default=None,
        description="the portal's public URL: a browser's `Origin` naming it counts as the "
                    "portal's own, for a proxy that renames the Host (redirects are built from "
                    "the request, behind a proxy from its forwarded headers)")

    oidc_issuer: str | None = Field(
        default=None,
        description="the IdP's issuer URL; discovery is read from it (required in production; "
                    "`portal dev` sets its local provider)")
    oidc_client_id: str = Field(
        default="gpu-tenant-portal", description="the portal's client id at the IdP")
    oidc_client_secret: str = Field(
        default="dev-client-secret",  # the local provider accepts any
        description="the portal's client secret at the IdP")
    oidc_admin_group: str = Field(
        default="platform-admins",
        description="members of this group (in the groups claim) are platform admins")
    oidc_groups_claim: str = Field(
        default="groups", description="the claim that lists a user's groups")
    oidc_scopes: str = Field(
        default="openid email profile", description="scopes asked for at sign-in")

    web_workers: int | None = Field(
        default=None, ge=1, le=256,
        description="processes `portal serve` runs (`--workers` overrides it); unset: one per "
                    "CPU the container may use, on SQLite one")
    # Three, not more: the threads share one GIL, and with eight the pages' p99 at 32 clients
    # was 1.5 to 2 times three threads' (bench/README.md, "seventh round"). Raise it when many
    # requests wait on a remote API (kubeconfig issuance waits on the virtual cluster's).
    web_threads: int = Field(
        default=3, ge=1, le=200,
        description="worker threads for each of `portal serve`'s processes, with as many "
                    "database connections (+4)")
    # Requests in flight past which the portal answers 503 + Retry-After at once; below it, the
    # ones waiting for a thread form a bounded queue (shedding early only feeds retry loops).
    web_max_in_flight: int = Field(
        default=256, ge=1,
        description="requests in flight past which `portal serve` answers 503 with "
                    "`Retry-After` (probes are never turned away)")
    # A request's wait for a row another holds, its statements and a transaction left idle are
    # bounded by PostgreSQL itself: no request waits forever, nor holds others that long.
    web_lock_timeout_seconds: float = Field(
        default=2.0, ge=0, le=600,
        description="how long a web request waits for a row another request or the worker is "
                    "changing (PostgreSQL's `lock_timeout`) before it is answered 409 with "
                    "`Retry-After`; `0` waits without bound")
    web_statement_timeout_seconds: float = Field(
        default=30.0, ge=0, le=3600,
        description="the longest one SQL statement of a web request runs (PostgreSQL's "
                    "`statement_timeout`) before it is cancelled and the request answered 503 "
                    "with `Retry-After`; `0` is no limit")
    web_idle_transaction_seconds: float = Field(
        default=60.0, ge=0, le=3600,
        description="how long PostgreSQL keeps a web request's transaction that does nothing "
                    "(`idle_in_transaction_session_timeout`) before it ends its connection and "
                    "so its locks; a request's transaction is idle only while it waits on a "
                    "virtual cluster's API (issuing a kubeconfig); `0` is no limit")
    web_shutdown_seconds: float = Field(
        default=20.0, ge=0, le=3600,
        description="on SIGTERM, how long `portal serve` lets requests in progress finish "
                    "before it cancels them and exits (keep it below the orchestrator's grace "
                    "period, 30 s by default in Kubernetes)")
    max_body_bytes: int = Field(
        default=256 * 1024, ge=1024,
        description="the largest request body the portal takes, in bytes (default 256 KiB, "
                    "many times any form or JSON body it expects); a larger one is a 413 "
                    "before it is read. Host clusters' credentials take "
                    "`PORTAL_MAX_UPLOAD_BYTES`")
    max_upload_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024,
        description="the largest body, in bytes, of a host cluster's registration or new "
                    "credentials, on the API and the hosts pages (default 4 MiB: a kubeconfig, "
                    "token and CA certificate take up to 256 KiB of text each)")
    auth_cache_seconds: float = Field(
        default=5.0, ge=0, le=60,
        description="how long a process keeps who a token or signed-in user is (their roles "
                    "and browser session included) and tenants; a change applies at once in "
                    "the process that made it, in the others within a second on PostgreSQL "
                    "(`NOTIFY`), else after at most this long; `0` turns it off")

    auth_failures_per_minute: int = Field(
        default=60, ge=0,
        description="failed API tokens a minute from one client address (IPv6: its /64) or "
                    "with one token prefix, past which further failures from there are "
                    "answered 429 with `Retry-After` until the minute is over, and requests "
                    "with that prefix too, unread; a valid token from a blocked address is "
                    "served; counted per web process; `0` turns it off")
    audit_denial_window_seconds: float = Field(
        default=60.0, gt=0, le=3600,
        description="refused requests of one kind (status, caller, route) are audited once "
                    "per this long; the rest of the window's are counted and written as one "
                    "`authz.denied` row with `count` when it closes")
    trusted_proxies: str | None = Field(
        default=None,
        description="comma-separated addresses or networks of the proxies in front of "
                    "`portal serve` whose `X-Forwarded-For` names the client (the address "
                    "failed API tokens are counted by); unset: uvicorn's `FORWARDED_ALLOW_IPS`, "
                    "else `127.0.0.1,::1`")

    metrics_token: str | None = Field(
        default=None,
        description="the bearer token a scraper sends for `GET /metrics` on the public port "
                    "(`Authorization: Bearer ...`); unset: that path answers 404 (use "
                    "`PORTAL_METRICS_ADDRESS`)")
    metrics_address: str | None = Field(
        default=None,
        description="`host:port` where `portal serve` also serves its metrics without a token "
                    "(e.g. `127.0.0.1:9464`); keep it off the ingress; unset: not served")
    worker_metrics_address: str | None = Field(
        default="127.0.0.1:9465",
        description="`host:port` where `portal worker` serves its metrics (and the business "
                    "gauges) without a token; empty: not served")

    session_idle_minutes: int = Field(
        default=60, description="a browser session ends after this long without a request")
    session_absolute_hours: int = Field(
        default=12, description="a browser session ends this long after sign-in, whatever "
                                "its activity")

    # What one tenant or user may hold at once (issue 53): a shared service bounds each.
    tenant_max_pending_quota_requests: int = Field(
        default=10, ge=1, le=10_000,
        description="pending quota requests a tenant may have at once; one more is a 409 "
                    "naming the limit and the count, until a request is decided or cancelled")
    tenant_max_clusters: int = Field(
        default=50, ge=1, le=100_000,
        description="virtual clusters a tenant may have at once (those being deleted "
                    "included, as they still run); one more is a 409 naming the limit and "
                    "the count")
    user_max_live_tokens: int = Field(
        default=25, ge=1, le=10_000,
        description="API tokens a user may hold that are neither revoked nor expired; one "
                    "more is a 409 naming the limit and the count")
    token_max_lifetime_days: int = Field(
        default=90, ge=1, le=365,
        description="the longest lifetime, in days, of an API token made on the API, the "
                    "tokens page or `portalctl login` (longer is a 422); operators' "
                    "`portal tokens create` is not bound by it")

    kubeconfig: str | None = Field(
        default=None,
        description="the host cluster's kubeconfig; unset: in-cluster config when present, "
                    "otherwise no cluster")
    kube_qps: float = Field(
        default=20.0,
        description="client-side rate limit towards the host API server, requests per second "
                    "(one limit per process, shared by the worker's threads)")
    kube_burst: int = Field(
        default=40, description="the burst above `PORTAL_KUBE_QPS` the client allows")
    rack_label: str = Field(
        default="network.topology.example.com/rack",
        description="the site-specific node label naming a rack/block")
    pod_security: Literal["restricted", "baseline"] = Field(
        default="restricted",
        description="Pod Security level enforced on tenant namespaces (`baseline` allowed)")
    # MAJOR.MINOR.PATCH (the vCluster image tag); the first is the default for new clusters.
    kubernetes_versions: list[str] = Field(
        default=["1.32.4", "1.31.8", "1.30.12"],
        description="JSON list of the Kubernetes versions (vCluster image tags) tenants may "
                    "pick; the first is the default for new clusters")
    # Where tenants reach a virtual cluster's API server (exportKubeConfig.server).
    cluster_endpoint_template: str = Field(
        default="https://{cluster}.{tenant}.vc.example.com",
        description="where tenants reach a virtual cluster's API server; `{cluster}` and "
                    "`{tenant}` are filled in (your ingress or load balancer must route it)")
    control_plane_node_selector: dict[str, str] = Field(
        default={},
        description="JSON object of node labels the virtual clusters' control planes are "
                    "scheduled on (e.g. CPU nodes); empty: anywhere the host scheduler puts them")
    helm_binary: str = Field(
        default="helm", description="the `helm` executable the worker installs vCluster with")
    vcluster_chart_repo: str = Field(
        default="https://charts.loft.sh", description="Helm repository of the vCluster chart")
    vcluster_chart_version: str = Field(
        default="0.30.0", description="vCluster chart version installed for new clusters")
    # The vCluster build the host runs: "oss" never gets a Pro-only value (translate patches, ...).
    vcluster_edition: Literal["oss", "pro"] = Field(
        default="oss",
        description="the vCluster build on the host: `oss` never gets Pro-only values "
                    "(shared-pool pods get KAI's scheduler and queue from the portal's "
                    "admission webhook); `pro` (licensed) sets them with translate patches")
    kubeconfig_default_hours: float = Field(
        default=8.0, description="lifetime of an issued kubeconfig when none is asked for")
    kubeconfig_max_hours: float = Field(
        default=24.0, description="the longest lifetime an issued kubeconfig may have")

    # The shared-pool admission webhook (`portal webhook`) and where the worker registers it.
    webhook_namespace: str = Field(
        default="gpu-tenant-portal",
        description="host namespace of the webhook's TLS Secret (and its Service); the worker "
                    "creates it")
    webhook_service_name: str = Field(
        default="gpu-tenant-portal-webhook",
        description="the Service (port 443) through which the API server calls `portal webhook`")
    webhook_url: str | None = Field(
        default=None,
        description="the `https://` base address of a webhook outside the cluster, such as "
                    "`https://webhook.example.com:9443`; the portal adds the path "
                    "(`/mutate-pods`) and the environment's host calls it instead of the "
                    "Service (other hosts: each host's webhook URL, the same rule)")
    webhook_hosts: list[str] = Field(
        default=[],
        description="JSON list of the names and IPs in the serving certificate; empty: the "
                    "URL's host, else `<service>.<namespace>.svc` and `….svc.cluster.local`; "
                    "the host of each host cluster's webhook URL is added either way")
    webhook_certificate_days: int = Field(
        default=90, ge=3,
        description="lifetime of the serving certificate; the worker rotates it with a third "
                    "left")

    # GPU utilisation: the DCGM exporter's series, read from the operator's Prometheus.
    prometheus_url: str | None = Field(
        default=None,
        description="base address of the operator's Prometheus HTTP API (e.g. "
                    "`http://prometheus.monitoring:9090`) the portal reads the DCGM exporter's "
                    "GPU utilisation from; unset: utilisation is shown as unknown")
    prometheus_timeout_seconds: float = Field(
        default=3.0, gt=0, le=30,
        description="the longest the portal waits on Prometheus for one page or API answer; "
                    "past it the figures say unknown")
    idle_gpu_utilisation_percent: float = Field(
        default=5.0, ge=0, le=100,
        description="a bound GPU is idle while its utilisation (`DCGM_FI_DEV_GPU_UTIL`) stays "
                    "below this many percent")
    idle_gpu_window_minutes: int = Field(
        default=30, ge=1, le=10080,
        description="a GPU is idle past the window when it was bound this many minutes and its "
                    "highest utilisation over them is below "
                    "`PORTAL_IDLE_GPU_UTILISATION_PERCENT`")
    utilisation_scrape_seconds: int = Field(
        default=60, ge=1, le=3600,
        description="how often the operator's Prometheus scrapes the DCGM exporter; a sleep "
                    "policy that reads idleness from GPU utilisation looks back at least two "
                    "scrapes, so a shortened (sped-up) idle window still holds two readings")

    # Bare-metal machines (Metal3): what a provisioned machine is imaged with and how long the
    # bootstrap token it joins with lives.
    machine_image_url: str = Field(
        default="http://machine-images.portal-machines.svc/gpu-node.qcow2",
        description="the OS image Metal3 writes to a provisioned bare-metal machine (a URL "
                    "Ironic can download; the image runs cloud-init and a kubelet)")
    machine_image_checksum: str | None = Field(
        default=None,
        description="the image's checksum, or the URL of a checksum file; unset: "
                    "`PORTAL_MACHINE_IMAGE_URL` followed by `.sha256sum`")
    machine_image_checksum_type: Literal["md5", "sha256", "sha512", "auto"] = Field(
        default="sha256", description="the checksum's algorithm (`auto`: Ironic guesses)")
    machine_image_format: Literal["raw", "qcow2", "vdi", "vmdk", "live-iso"] = Field(
        default="qcow2", description="the image's disk format")
    machine_join_token_ttl_seconds: int = Field(
        default=3600, ge=300, le=86400,
        description="lifetime of the bootstrap token a provisioned machine joins its host "
                    "cluster with; the worker mints another if the machine has not started "
                    "provisioning when it nears its end")

    sleep_delete_warning_hours: float = Field(
        default=24.0, ge=0, le=24 * 30,
        description="how long before a sleeping cluster's deletion (its sleep policy's days "
                    "asleep) the deletion is announced on its page and in the audit log; it "
                    "is deleted no sooner than this long after the announcement")
    sleep_policy_speedup: float = Field(
        default=1.0, ge=1, le=1_000_000,
        description="for demonstrations and tests only: the sleep policies' idle minutes, days "
                    "asleep and deletion warning pass this many times faster (`portal lab` "
                    "runs them 2880 times faster); 1 in production")

    worker_poll_seconds: float = Field(
        default=2.0, description="how often an idle worker looks for due work")
    worker_resync_seconds: float = Field(
        default=300.0,
        description="how often each object the worker keeps (a cluster, a host's nodes, health, "
                    "webhook and usage) is looked at again when nothing changed it")
    # Short, and renewed by a heartbeat while a worker holds it (helm included): a crashed
    # worker's clusters are taken up by another within about this long.
    worker_lease_seconds: float = Field(
        default=30.0, ge=3.0,
        description="a worker's lease on an item of work (a cluster, a host's nodes, …), renewed "
                    "every third of it while the worker lives; a crashed worker's items are "
                    "adopted after at most this long")
    # Items one worker reconciles at once; every Kubernetes call still shares one
    # PORTAL_KUBE_QPS/BURST limit. Keep it below the database pool (15 connections).
    worker_concurrency: int = Field(
        default=8, ge=1, le=64,
        description="items of work one worker reconciles at once (keep it below the database "
                    "pool, 15)")

    worker_lock_timeout_seconds: float = Field(
        default=10.0, ge=0, le=3600,
        description="the worker's `lock_timeout`: how long a reconcile waits for a row a "
                    "request holds before it fails and is retried with backoff; `0` waits "
                    "without bound")
    worker_statement_timeout_seconds: float = Field(
        default=120.0, ge=0, le=86400,
        description="the worker's `statement_timeout`: the longest one SQL statement of a "
                    "reconcile runs (folding usage is the longest); `0` is no limit")
    worker_idle_transaction_seconds: float = Field(
        default=300.0, ge=0, le=86400,
        description="the worker's `idle_in_transaction_session_timeout`: how long a "
                    "reconcile's transaction may wait on a host's API between statements "
                    "before PostgreSQL ends its connection; `0` is no limit")

    simulated_host: bool = Field(
        default=False,
        description="development only: the host cluster is simulated in memory (a demo GPU "
                    "fleet; nothing runs, kubeconfigs cannot connect); `portal dev` turns it on "
                    "unless given `--no-simulate` or a real host; refused in production")
    simulated_startup_seconds: float = Field(
        default=8.0, ge=0, le=600,
        description="how long a simulated virtual cluster takes to come up (with "
                    "`PORTAL_SIMULATED_HOST`); a simulated bare-metal machine takes half of it "
                    "for each Metal3 step")

    log_level: str = Field(
        default="INFO", description="log level; every line carries the request id")

    @field_validator("metrics_address", "worker_metrics_address")
    @classmethod
    def _listen_address(cls, value: str | None) -> str | None:
        if not value:
            return None
        listen_address(value)
        return value

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url_is_a_base_address(cls, url: str | None) -> str | None:
        problem = None if url is None else webhook_url_problem(url)
        if problem:
            raise ValueError(f"PORTAL_WEBHOOK_URL {problem}")
        return url

    @field_validator("prometheus_url")
    @classmethod
    def _prometheus_url_is_a_base_address(cls, url: str | None) -> str | None:
        problem = None if not url else prometheus_url_problem(url)
        if problem:
            raise ValueError(f"PORTAL_PROMETHEUS_URL {problem}")
        return url or None

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, value: str | None) -> str | None:
        """uvicorn would take a mistyped entry as a name no connection ever has."""
        for entry in filter(None, (item.strip() for item in (value or "").split(","))):
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"PORTAL_TRUSTED_PROXIES: {entry!r} is not an IP "
                                 "address or network") from None
        return value

    @field_validator("encryption_old_keys", mode="before")
    @classmethod
    def _split_old_keys(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [key.strip() for key in text.split(",") if key.strip()]

    @field_validator("encryption_old_keys")
    @classmethod
    def _old_keys_are_fernet_keys(cls, keys: list[str]) -> list[str]:
        for position, key in enumerate(keys, start=1):
            try:
                Fernet(key.encode())
            except ValueError as error:
                raise ValueError(
                    f"PORTAL_ENCRYPTION_OLD_KEYS: key {position} is not a Fernet key "
                    "(32 url-safe base64-encoded bytes, as `portal keys generate` prints)"
                ) from error
        return keys

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
        if DEV_ENCRYPTION_KEY in self.encryption_old_keys:
            raise InsecureProductionConfig(
                "PORTAL_ENCRYPTION_OLD_KEYS lists the development key: anyone could have "
                "sealed what it opens; re-encrypt with `portal keys rotate` outside production"
            )
        if not self.oidc_issuer:
            raise InsecureProductionConfig("PORTAL_OIDC_ISSUER must be set in production")
        if self.simulated_host:
            raise InsecureProductionConfig(
                "PORTAL_SIMULATED_HOST is for development only; production needs a real host "
                "cluster (PORTAL_KUBECONFIG or in-cluster config)")
        if self.is_sqlite:
            raise InsecureProductionConfig(
                "PORTAL_DATABASE_URL is SQLite, which is for development only; "
                "use PostgreSQL (postgresql+psycopg://user:pass@host/db) in production"
            )
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets) as the host and the port to listen on."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port")
    return host.strip("[]"), int(port)


@lru_cache
def get_settings() -> Settings:
    return Settings()
