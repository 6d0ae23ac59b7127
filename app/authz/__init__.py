from app.authz.scoping import (
    ensure_allowed,
    ensure_platform_admin,
    ensure_platform_writer,
    tenant_for,
    tenant_ids_managed_by,
    tenants_visible_to,
)

__all__ = ["ensure_allowed", "ensure_platform_admin", "ensure_platform_writer",
           "tenant_for", "tenant_ids_managed_by",
           "tenants_visible_to"]
