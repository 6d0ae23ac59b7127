"""Shapes of kubeconfig requests and grants on the API and in forms."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from app.kube.port import MIN_TOKEN_EXPIRATION_SECONDS

KubeconfigRole = Literal["admin", "edit", "view"]
# A hard ceiling for the schema; the operator's maximum (settings) is checked by the service.
LIFETIME_CEILING_SECONDS = 366 * 24 * 3600


class KubeconfigRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: KubeconfigRole = Field(
        default="view", description="admin (tenant admins), edit (members) or view (anyone)"
    )
    lifetime_seconds: StrictInt | None = Field(
        default=None, ge=MIN_TOKEN_EXPIRATION_SECONDS, le=LIFETIME_CEILING_SECONDS,
        description="token lifetime: at least 600 s, at most the operator's maximum; "
                    "default the operator's default (8 h)",
    )


class GrantOut(BaseModel):
    id: int
    cluster: str
    user_id: int
    user_email: str
    user_name: str
    role: KubeconfigRole
    service_account: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoke_reason: str | None = None


@dataclass(frozen=True)
class IssuedKubeconfig:
    """The one moment the token exists in the portal: in the YAML on its way to the caller."""

    grant: GrantOut
    yaml: str
    filename: str
