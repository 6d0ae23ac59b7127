"""REST: bare-metal GPU machines, for platform admins. BMC credentials go in, never out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import Response

from app.auth.deps import CurrentPrincipal
from app.auth.idempotency import IdempotencyKeyHeader, run_idempotent
from app.authz import ensure_platform_writer
from app.authz.routes import PLATFORM_WRITE
from app.http.deps import DbSession, get_settings_dep
from app.http.pagination import Page, Paging
from app.http.problems import problems
from app.http.routing import UnitOfWorkRoute
from app.kit.config import Settings
from app.machines import service
from app.machines.schemas import BmcCredentialsIn, MachineOut, MachineRegister

router = APIRouter(prefix="/api/v1/machines", tags=["machines"], route_class=UnitOfWorkRoute)
MachineName = Annotated[str, Path(max_length=63, description="the machine's name")]
AppSettings = Annotated[Settings, Depends(get_settings_dep)]


@router.get("", response_model=Page[MachineOut],
            summary="List bare-metal machines", responses=problems(403))
def list_machines(db: DbSession, principal: CurrentPrincipal,
                  paging: Paging) -> Page[MachineOut]:
    """The registered machines with their phase and Metal3's reason (platform admins). BMC
    credentials never come out."""
    return service.list_machines(db, principal, paging)


@router.post("", dependencies=PLATFORM_WRITE, status_code=201, response_model=MachineOut,
             summary="Register a bare-metal machine", responses=problems(403, 409))
def register_machine(request: Request, payload: MachineRegister, db: DbSession,
                     principal: CurrentPrincipal, settings: AppSettings,
                     key: IdempotencyKeyHeader = None) -> Response:
    """Registers a machine by its BMC (credentials stored encrypted) into the pool of its host
    cluster: the worker creates its BareMetalHost, which Metal3 registers and inspects
    (platform admins). 409 when the name is taken. Audited."""
    return run_idempotent(db, principal, key, path=request.url.path, payload=payload,
                          allowed=lambda: ensure_platform_writer(principal),
                          create=lambda: service.register_machine(db, principal, settings,
                                                                  payload))


@router.get("/{name}", response_model=MachineOut,
            summary="Get a bare-metal machine", responses=problems(403, 404))
def get_machine(name: MachineName, db: DbSession, principal: CurrentPrincipal) -> MachineOut:
    """One machine with its phase, Metal3's state and reason, and conditions (platform
    admins)."""
    return service.get_machine(db, principal, name)


@router.post("/{name}/provision", dependencies=PLATFORM_WRITE, response_model=MachineOut,
             summary="Provision a bare-metal machine", responses=problems(403, 404, 409))
def provision(name: MachineName, db: DbSession, principal: CurrentPrincipal) -> MachineOut:
    """Metal3 images the machine with user data that joins its host cluster; it is `joined`
    once its Node is Ready, and then appears in the GPU inventory (platform admins). Audited."""
    return service.provision(db, principal, name)


@router.post("/{name}/release", dependencies=PLATFORM_WRITE, response_model=MachineOut,
             summary="Release a bare-metal machine", responses=problems(403, 404, 409))
def release(name: MachineName, db: DbSession, principal: CurrentPrincipal) -> MachineOut:
    """Metal3 deprovisions and cleans the machine, which returns to the pool; its Node is
    removed. 409 while the node is dedicated to a tenant (platform admins). Audited."""
    return service.release(db, principal, name)


@router.put("/{name}/bmc-credentials", dependencies=PLATFORM_WRITE, response_model=MachineOut,
            summary="Replace a machine's BMC credentials", responses=problems(403, 404, 409))
def replace_bmc_credentials(name: MachineName, payload: BmcCredentialsIn, db: DbSession,
                            principal: CurrentPrincipal, settings: AppSettings) -> MachineOut:
    """Replaces the BMC user and password, stored encrypted; the worker rewrites the BMC Secret
    (platform admins). Audited."""
    return service.replace_bmc_credentials(db, principal, settings, name, payload)


@router.delete("/{name}", dependencies=PLATFORM_WRITE, status_code=202, response_model=MachineOut,
               summary="Delete a bare-metal machine", responses=problems(403, 404, 409))
def delete_machine(name: MachineName, db: DbSession, principal: CurrentPrincipal) -> MachineOut:
    """Removes a machine that is in the pool: the worker deletes its BareMetalHost and secrets,
    then the machine (202; it shows `deleting` until then). 409 while it is provisioned
    (platform admins). Audited."""
    return service.delete_machine(db, principal, name)
