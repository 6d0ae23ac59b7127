"""A host cluster: where tenants' virtual clusters, queues and dedicated nodes live."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, String
from sqlalchemy.orm import Mapped, mapped_column

from app.database.core import Base, utcnow

# How the portal reaches a host: a stored kubeconfig, a stored ServiceAccount token (kept as
# the kubeconfig it makes), or the environment's (PORTAL_KUBECONFIG, else in-cluster config).
CREDENTIAL_KINDS = ("kubeconfig", "token", "env")
# cordoned: takes no new clusters; draining: cordoned and marked for evacuation.
HOST_STATES = ("active", "cordoned", "draining")


class HostCluster(Base):
    """A GPU Kubernetes cluster the portal manages; the environment's is the default one."""

    __tablename__ = "host_clusters"
    __table_args__ = (
        CheckConstraint("credential_kind IN ('kubeconfig', 'token', 'env')",
                        name="credential_kind_known"),
        CheckConstraint("state IN ('active', 'cordoned', 'draining')", name="state_known"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    region: Mapped[str] = mapped_column(String(63), default="")
    description: Mapped[str] = mapped_column(String(500), default="")
    api_endpoint: Mapped[str] = mapped_column(String(500), default="")
    # SecretBox ciphertext of the kubeconfig YAML; never leaves the hosts service decrypted
    # except as a HostTarget handed to the connector.
    credentials_encrypted: Mapped[str | None]
    credential_kind: Mapped[str] = mapped_column(String(20), default="env")
    credentials_set_at: Mapped[datetime | None]
    is_default: Mapped[bool] = mapped_column(default=False)
    state: Mapped[str] = mapped_column(String(20), default="active")
    # None: the portal's PORTAL_KUBE_QPS / PORTAL_KUBE_BURST.
    kube_qps: Mapped[float | None]
    kube_burst: Mapped[int | None]
    # Where this host's API server reaches `portal webhook` (https://, no path needed); the
    # worker registers the admission webhook there. None: the environment's host uses
    # PORTAL_WEBHOOK_URL or the in-cluster Service, any other host gets no webhook.
    webhook_url: Mapped[str | None] = mapped_column(String(500))
    health_reachable: Mapped[bool | None]
    health_checks: Mapped[list[Any]] = mapped_column(default=list)
    health_checked_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    @property
    def takes_new_clusters(self) -> bool:
        return self.state == "active"
