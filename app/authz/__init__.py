from app.authz.scoping import (
    Action,
    RoleForbidden,
    ScopedTenant,
    TenantHidden,
    ensure_allowed,
    ensure_platform_admin,
    ensure_platform_writer,
    tenant_ids_managed_by,
)

__all__ = ["Action", "RoleForbidden", "ScopedTenant", "TenantHidden", "ensure_allowed",
           "ensure_platform_admin", "ensure_platform_writer", "tenant_ids_managed_by"]
