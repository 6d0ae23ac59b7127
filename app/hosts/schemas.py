"""Shapes of host clusters on the API and in forms. Credentials only ever come in."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.hosts.webhook_route import MAX_WEBHOOK_URL, webhook_url_problem
from app.kit.validation import MultiLine, SingleLine, dns_label_problem

CredentialKind = Literal["kubeconfig", "token", "env"]
HostState = Literal["active", "cordoned", "draining"]
MAX_HOST_NAME = 63
MAX_CREDENTIAL_TEXT = 256 * 1024


def _label(value: str, what: str, *, allow_empty: bool) -> str:
    if allow_empty and value == "":
        return value
    problem = dns_label_problem(value, MAX_HOST_NAME)
    if problem:
        raise ValueError(f"the {what} is {problem}" if problem == "required" else problem)
    return value


def _webhook_url(value: str | None) -> str | None:
    if value is None or value.strip() == "":
        return None  # none: no webhook on this host (the environment's keeps its default)
    problem = webhook_url_problem(value.strip())
    if problem:
        raise ValueError(f"the webhook URL {problem}")
    return value.strip()


WEBHOOK_URL_HELP = ("the https:// base address at which this host's API server reaches `portal "
                    "webhook` (e.g. https://webhook.gpu-eu-2.example.com:9443), without a "
                    "path of the webhook's own: the portal registers it with the path "
                    "/mutate-pods/hosts/<id>. "
                    "Unset: the environment's host uses PORTAL_WEBHOOK_URL or the in-cluster "
                    "Service, any other host gets no webhook (and no shared-pool clusters)")


class HostCredentialsIn(BaseModel):
    """A kubeconfig, or a ServiceAccount token with the API server's URL and CA certificate."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    kind: Literal["kubeconfig", "token"]
    kubeconfig: str | None = Field(default=None, max_length=MAX_CREDENTIAL_TEXT,
                                   description="kind kubeconfig: the whole file, inline "
                                               "certificates and token or client key")
    server: SingleLine | None = Field(default=None, max_length=500,
                                      description="kind token: the API server's https:// URL")
    token: str | None = Field(default=None, max_length=MAX_CREDENTIAL_TEXT,
                              description="kind token: a ServiceAccount token")
    ca_certificate: str | None = Field(default=None, max_length=MAX_CREDENTIAL_TEXT,
                                       description="kind token: the API server's CA (PEM)")


class HostRegister(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: str = Field(max_length=200, examples=["gpu-eu-2"])
    region: str = Field(default="", max_length=200, examples=["eu-west"])
    description: MultiLine = Field(default="", max_length=500)
    kube_qps: float | None = Field(default=None, gt=0, le=10000,
                                   description="requests per second towards this host; "
                                               "unset: PORTAL_KUBE_QPS")
    kube_burst: int | None = Field(default=None, ge=1, le=100000,
                                   description="burst above kube_qps; unset: "
                                               "PORTAL_KUBE_BURST")
    webhook_url: SingleLine | None = Field(default=None, max_length=MAX_WEBHOOK_URL,
                                           description=WEBHOOK_URL_HELP)
    credentials: HostCredentialsIn

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _label(value, "name", allow_empty=False)

    @field_validator("webhook_url")
    @classmethod
    def _webhook(cls, value: str | None) -> str | None:
        return _webhook_url(value)

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        return _label(value, "region", allow_empty=True)


class HostUpdate(BaseModel):
    """Fields left out stay; ``kube_qps``/``kube_burst`` sent as null go back to the default."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=200)
    region: str | None = Field(default=None, max_length=200)
    description: MultiLine | None = Field(default=None, max_length=500)
    kube_qps: float | None = Field(default=None, gt=0, le=10000)
    kube_burst: int | None = Field(default=None, ge=1, le=100000)
    webhook_url: SingleLine | None = Field(default=None, max_length=MAX_WEBHOOK_URL,
                                           description=WEBHOOK_URL_HELP
                                           + "; null or '' removes it")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _label(value, "name", allow_empty=False)

    @field_validator("webhook_url")
    @classmethod
    def _webhook(cls, value: str | None) -> str | None:
        return _webhook_url(value)

    @field_validator("region")
    @classmethod
    def _region(cls, value: str | None) -> str | None:
        return None if value is None else _label(value, "region", allow_empty=True)


class StateChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: SingleLine = Field(default="", max_length=500)


class CredentialsOut(BaseModel):
    """What may be shown of a host's credentials: never the secret itself."""

    kind: CredentialKind
    server: str = Field(description="the API server URL ('' for env: the environment's)")
    set_at: datetime | None


class HealthCheckOut(BaseModel):
    name: str
    passed: bool
    message: str


class HealthOut(BaseModel):
    reachable: bool | None = Field(description="null: never checked")
    checked_at: datetime | None
    checks: list[HealthCheckOut]


class HostOut(BaseModel):
    id: int
    name: str
    region: str
    description: str
    state: HostState
    is_default: bool = Field(description="the environment's host (PORTAL_KUBECONFIG)")
    takes_new_clusters: bool
    credentials: CredentialsOut
    kube_qps: float | None
    kube_burst: int | None
    webhook_url: str | None = Field(description="as set by an admin; null: none")
    webhook_endpoint: str = Field(
        description="where this host's API server calls the admission webhook: a URL, "
                    "`environment` (PORTAL_WEBHOOK_URL or the in-cluster Service), or '' "
                    "(nowhere: no webhook, no shared-pool clusters on this host)")
    health: HealthOut
    created_at: datetime
    updated_at: datetime
