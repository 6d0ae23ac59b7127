"""The notification channels' settings (``PORTAL_SMTP_*``, ``PORTAL_NOTIFY_*``), a part of
``Settings`` kept in a module of its own."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings


class NotifySettings(BaseSettings):
    smtp_host: str | None = Field(
        default=None,
        description="the SMTP server notifications are emailed through; unset: email "
                    "notifications wait, pending, until it is set (nothing is lost)")
    smtp_port: int = Field(default=587, ge=1, le=65535, description="the SMTP server's port")
    smtp_security: Literal["starttls", "tls", "none"] = Field(
        default="starttls",
        description="`starttls` (the default; port 587), `tls` (TLS from the first byte; port "
                    "465) or `none` (only to a loopback host: a relay on the same machine)")
    smtp_username: str | None = Field(
        default=None, description="the SMTP login's user name; unset: no login")
    smtp_password: str | None = Field(
        default=None, repr=False,
        description="the SMTP login's password (sent only over TLS; never logged or shown)")
    smtp_from: str = Field(
        default="GPU Tenant Portal <portal@localhost>",
        description="the sender of notification emails (`Name <address>`)")
    smtp_ca_file: str | None = Field(
        default=None,
        description="a PEM file of the CAs to trust for the SMTP server instead of the "
                    "system's (a private relay's CA)")
    smtp_timeout_seconds: float = Field(
        default=10.0, gt=0, le=300,
        description="the longest the SMTP connection, each command and each answer may take")
    notify_webhook_allowed_networks: str = Field(
        default="",
        description="comma-separated CIDRs webhooks may reach although they are loopback, "
                    "link-local, private or the cloud's metadata addresses (refused otherwise)")
    notify_webhook_http_hosts: str = Field(
        default="",
        description="comma-separated host names whose webhooks may use plain `http://` "
                    "(every other webhook must be `https://`)")
    notify_webhook_ca_file: str | None = Field(
        default=None,
        description="a PEM file of the CAs to trust for webhook receivers instead of the "
                    "system's")
    notify_stuck_minutes: int = Field(
        default=30, ge=1, le=10080,
        description="a cluster still provisioning (neither Ready nor Failed) this many minutes "
                    "after it began is told to its creator and its tenant's admins as stuck, "
                    "once per change of its spec")

    @field_validator("notify_webhook_allowed_networks")
    @classmethod
    def _networks_are_cidrs(cls, value: str) -> str:
        for entry in filter(None, (item.strip() for item in value.split(","))):
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"PORTAL_NOTIFY_WEBHOOK_ALLOWED_NETWORKS: {entry!r} is not "
                                 "an IP network (CIDR, such as 10.20.0.0/16)") from None
        return value

    @field_validator("smtp_security")
    @classmethod
    def _plain_smtp_only_to_loopback(cls, value: str, info: ValidationInfo) -> str:
        # A field validator: its error shows this value only, never the password beside it.
        host = info.data.get("smtp_host")
        if value == "none" and host and not _loopback(host):
            raise ValueError("PORTAL_SMTP_SECURITY=none is allowed only to a loopback host "
                             f"(not {host!r}): use starttls or tls")
        return value

    @property
    def notify_http_hosts(self) -> list[str]:
        return [h.strip().lower() for h in self.notify_webhook_http_hosts.split(",")
                if h.strip()]


def _loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
