from app.authz.scoping import (
    ensure_allowed,
    ensure_platform_admin,
    tenant_for,
    tenants_visible_to,
)

__all__ = ["ensure_allowed", "ensure_platform_admin", "tenant_for", "tenants_visible_to"]
