"""At most ``PORTAL_TENANT_MAX_PENDING_QUOTA_REQUESTS`` pending requests per tenant, counted
under a lock of the tenant's row so that two requests at once cannot both take the last place.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.database.concurrency import lock_row
from app.kit.config import Settings
from app.kit.limits import Limit
from app.quotas import repository
from app.tenants.models import Tenant


def pending_requests_limit(settings: Settings) -> Limit:
    return Limit("pending_quota_requests", "pending quota requests",
                 "PORTAL_TENANT_MAX_PENDING_QUOTA_REQUESTS",
                 settings.tenant_max_pending_quota_requests)


def ensure_room_for_a_request(db: Session, settings: Settings, tenant: Tenant) -> None:
    lock_row(db, Tenant, tenant.id, keys_free=True)
    pending_requests_limit(settings).ensure_room(
        repository.pending_count(db, tenant.id), f"tenant {tenant.slug}",
        "cancel one, or wait for a platform admin to decide one")
