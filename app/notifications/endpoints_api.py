"""REST: webhook endpoints, a tenant's (its admins) and the platform's (platform admins).

Creating takes no Idempotency-Key on purpose: a replayed answer would be the secret kept in
the database to replay it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.authz.routes import PLATFORM_WRITE
from app.http.deps import DbSession, RowId, get_settings_dep
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.notifications import endpoints as service
from app.notifications.endpoint_schemas import (
    EndpointCreate,
    EndpointCreated,
    EndpointOut,
    EndpointUpdate,
    SecretRolled,
    TestSent,
)

router = APIRouter(tags=["webhooks"], route_class=UnitOfWorkRoute)
AppSettings = Annotated[Settings, Depends(get_settings_dep)]
TENANT = "/api/v1/tenants/{tenant}/webhooks"
ADMIN = "/api/v1/admin/webhooks"
_CREATED = ("Registers an endpoint: a name, an https URL whose address is a public one (422 "
            "naming the reason otherwise), its format and the kinds it takes (null: all). The "
            "answer carries its signing secret, shown this once. Audited.")
_ROLLED = ("A new signing secret, shown this once; for 24 hours requests carry a second "
           "signature with the previous one. Audited.")
_TEST = ("Sends a notification of kind `test` to this endpoint only, through the outbox: the "
         "endpoint's recent deliveries show how it went. Audited.")


@router.get(TENANT, response_model=list[EndpointOut], summary="List a tenant's webhooks",
            responses=problems(403, 404))
def list_tenant_webhooks(tenant: str, db: DbSession,
                         principal: CurrentPrincipal) -> list[EndpointOut]:
    """The tenant's webhook endpoints with their state, last error, queue and recent
    deliveries (tenant admins)."""
    return service.list_endpoints(db, principal, tenant)


@router.post(TENANT, status_code=201, response_model=EndpointCreated,
             description=_CREATED,
             summary="Register a tenant webhook", responses=problems(403, 404, 409, 422))
def create_tenant_webhook(tenant: str, payload: EndpointCreate, db: DbSession,
                          principal: CurrentPrincipal, settings: AppSettings) -> EndpointCreated:
    return service.create_endpoint(db, principal, tenant, payload, settings)



@router.get(TENANT + "/{endpoint_id}", response_model=EndpointOut,
            summary="Get a tenant webhook", responses=problems(403, 404))
def get_tenant_webhook(tenant: str, endpoint_id: RowId, db: DbSession,
                       principal: CurrentPrincipal) -> EndpointOut:
    """One endpoint, its state and its recent deliveries (never its secret)."""
    return service.get_endpoint(db, principal, tenant, endpoint_id)


@router.patch(TENANT + "/{endpoint_id}", response_model=EndpointOut,
              summary="Change or disable a tenant webhook", responses=problems(403, 404, 422))
def update_tenant_webhook(tenant: str, endpoint_id: RowId, payload: EndpointUpdate,
                          db: DbSession, principal: CurrentPrincipal,
                          settings: AppSettings) -> EndpointOut:
    """Changes its name, URL (checked again), format, kinds, or disables it. Audited."""
    return service.update_endpoint(db, principal, tenant, endpoint_id, payload, settings)


@router.delete(TENANT + "/{endpoint_id}", status_code=204,
               summary="Delete a tenant webhook", responses=problems(403, 404))
def delete_tenant_webhook(tenant: str, endpoint_id: RowId, db: DbSession,
                          principal: CurrentPrincipal) -> Response:
    """Deletes the endpoint and its undelivered messages. Audited."""
    service.delete_endpoint(db, principal, tenant, endpoint_id)
    return Response(status_code=204)


@router.post(TENANT + "/{endpoint_id}/test", status_code=202, response_model=TestSent,
             description=_TEST,
             summary="Send a test to a tenant webhook", responses=problems(403, 404, 409))
def test_tenant_webhook(tenant: str, endpoint_id: RowId, db: DbSession,
                        principal: CurrentPrincipal) -> TestSent:
    return service.send_test(db, principal, tenant, endpoint_id)



@router.post(TENANT + "/{endpoint_id}/roll-secret", response_model=SecretRolled,
             description=_ROLLED,
             summary="Roll a tenant webhook's secret", responses=problems(403, 404))
def roll_tenant_webhook(tenant: str, endpoint_id: RowId, db: DbSession,
                        principal: CurrentPrincipal, settings: AppSettings) -> SecretRolled:
    return service.roll_secret(db, principal, tenant, endpoint_id, settings)



# ----- the platform's


@router.get(ADMIN, response_model=list[EndpointOut], summary="List the platform's webhooks",
            responses=problems(403))
def list_admin_webhooks(db: DbSession, principal: CurrentPrincipal) -> list[EndpointOut]:
    """The platform's webhook endpoints (hosts, machines, templates, quota requests), with
    their state and recent deliveries (platform admins)."""
    return service.list_endpoints(db, principal, None)


@router.post(ADMIN, status_code=201, response_model=EndpointCreated, dependencies=PLATFORM_WRITE,
             description=_CREATED,
             summary="Register a platform webhook", responses=problems(403, 409, 422))
def create_admin_webhook(payload: EndpointCreate, db: DbSession, principal: CurrentPrincipal,
                         settings: AppSettings) -> EndpointCreated:
    return service.create_endpoint(db, principal, None, payload, settings)



@router.get(ADMIN + "/{endpoint_id}", response_model=EndpointOut,
            summary="Get a platform webhook", responses=problems(403, 404))
def get_admin_webhook(endpoint_id: RowId, db: DbSession,
                      principal: CurrentPrincipal) -> EndpointOut:
    """One endpoint, its state and its recent deliveries (never its secret)."""
    return service.get_endpoint(db, principal, None, endpoint_id)


@router.patch(ADMIN + "/{endpoint_id}", response_model=EndpointOut, dependencies=PLATFORM_WRITE,
              summary="Change or disable a platform webhook", responses=problems(403, 404, 422))
def update_admin_webhook(endpoint_id: RowId, payload: EndpointUpdate, db: DbSession,
                         principal: CurrentPrincipal, settings: AppSettings) -> EndpointOut:
    """Changes its name, URL (checked again), format, kinds, or disables it. Audited."""
    return service.update_endpoint(db, principal, None, endpoint_id, payload, settings)


@router.delete(ADMIN + "/{endpoint_id}", status_code=204, dependencies=PLATFORM_WRITE,
               summary="Delete a platform webhook", responses=problems(403, 404))
def delete_admin_webhook(endpoint_id: RowId, db: DbSession,
                         principal: CurrentPrincipal) -> Response:
    """Deletes the endpoint and its undelivered messages. Audited."""
    service.delete_endpoint(db, principal, None, endpoint_id)
    return Response(status_code=204)


@router.post(ADMIN + "/{endpoint_id}/test", status_code=202, response_model=TestSent,
             dependencies=PLATFORM_WRITE,
             description=_TEST,
             summary="Send a test to a platform webhook",
             responses=problems(403, 404, 409))
def test_admin_webhook(endpoint_id: RowId, db: DbSession,
                       principal: CurrentPrincipal) -> TestSent:
    return service.send_test(db, principal, None, endpoint_id)



@router.post(ADMIN + "/{endpoint_id}/roll-secret", response_model=SecretRolled,
             dependencies=PLATFORM_WRITE,
             description=_ROLLED,
             summary="Roll a platform webhook's secret",
             responses=problems(403, 404))
def roll_admin_webhook(endpoint_id: RowId, db: DbSession, principal: CurrentPrincipal,
                       settings: AppSettings) -> SecretRolled:
    return service.roll_secret(db, principal, None, endpoint_id, settings)

