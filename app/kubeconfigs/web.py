"""HTML: the kubeconfig panel the cluster page loads over htmx, issue and revoke."""

from __future__ import annotations

import base64
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.auth.csrf import STATE_CHANGING
from app.auth.deps import CurrentPrincipal
from app.auth.principal import Principal
from app.http.deps import DbSession, RowId
from app.http.routing import UnitOfWorkRoute
from app.kubeconfigs import panel_view, service
from app.kubeconfigs.api import Clusters, kubeconfig_response
from app.kubeconfigs.schemas import IssuedKubeconfig, KubeconfigRequest
from app.web.forms import (
    FieldErrors,
    FormFields,
    form_payload,
    go_to,
    is_htmx,
    submitted,
    with_toast,
)
from app.web.templating import render

router = APIRouter(include_in_schema=False, route_class=UnitOfWorkRoute)
PANEL = "/t/{tenant}/clusters/{cluster}/kubeconfigs"


def _panel(request: Request, db: DbSession, principal: Principal, tenant: str, cluster: str,
           *, form: dict[str, Any] | None = None, errors: FieldErrors | None = None,
           issued: IssuedKubeconfig | None = None, confirming: int | None = None,
           revoked_now: int | None = None, status_code: int = 200) -> Response:
    panel = panel_view.kubeconfig_panel(db, principal, request.app.state.settings, tenant, cluster)
    template = "kubeconfigs/_panel.html" if is_htmx(request) else "kubeconfigs/page.html"
    response = render(request, template, {
        "panel": panel, "form": form or {}, "errors": errors or {}, "issued": issued,
        "confirming": confirming, "revoked_now": revoked_now,
        "issued_b64": base64.b64encode(issued.yaml.encode()).decode() if issued else "",
    }, status_code=status_code)
    if issued is not None:
        response.headers["Cache-Control"] = "no-store"
    return response


@router.get(PANEL)
def panel(request: Request, tenant: str, cluster: str, db: DbSession,
          principal: CurrentPrincipal) -> Response:
    return _panel(request, db, principal, tenant, cluster)


@router.post(PANEL, dependencies=STATE_CHANGING)
def issue(request: Request, tenant: str, cluster: str, db: DbSession,
          principal: CurrentPrincipal, clusters: Clusters, fields: FormFields) -> Response:
    """A plain form post downloads the file; over htmx the panel shows it to copy or save."""
    payload = form_payload(fields, keys=("role", "lifetime_seconds"),
                           integers=("lifetime_seconds",))
    settings = request.app.state.settings

    def issue_one() -> Response:
        issued = service.issue_kubeconfig(db, principal, clusters, settings, tenant, cluster,
                                          KubeconfigRequest.model_validate(payload))
        if issued is None:
            return _panel(request, db, principal, tenant, cluster, form=payload,
                          status_code=202, errors={
                              "form": f"Cluster {cluster} was asleep or is waking up: it wakes "
                                      "now. Ask again once it is Ready (about a minute)."})
        if not is_htmx(request):
            return kubeconfig_response(issued)
        return _panel(request, db, principal, tenant, cluster, form=payload, issued=issued,
                      status_code=201)

    return submitted(issue_one, lambda refusal: _panel(
        request, db, principal, tenant, cluster, form=payload, errors=refusal.errors,
        status_code=refusal.status))


@router.get(PANEL + "/{grant_id}/revoke")
def confirm_revoke(request: Request, tenant: str, cluster: str, grant_id: RowId, db: DbSession,
                   principal: CurrentPrincipal) -> Response:
    """The panel asking, in the grant's row, whether to revoke it (no browser dialog)."""
    return _panel(request, db, principal, tenant, cluster, confirming=grant_id)


@router.post(PANEL + "/{grant_id}/revoke", dependencies=STATE_CHANGING)
def revoke(request: Request, tenant: str, cluster: str, grant_id: RowId, db: DbSession,
           principal: CurrentPrincipal, clusters: Clusters) -> Response:
    grant = service.revoke_grant(db, principal, clusters, tenant, cluster, grant_id)
    done = f"Revoked the {grant.role} kubeconfig of {grant.user_email}: it no longer works."
    if not is_htmx(request):
        return go_to(request, PANEL.format(tenant=tenant, cluster=cluster))
    return with_toast(_panel(request, db, principal, tenant, cluster, revoked_now=grant.id), done)
