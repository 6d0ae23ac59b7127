"""What people type first, as kubectl and gcloud taught them: the tenant as a positional
argument, a grant by its id alone, the platform admins' queue without a tenant."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.tenants.models import Tenant
from tests import factories
from tests.portalctl.conftest import Portal, PortalCtl, Result


def test_the_tenant_is_taken_as_a_positional_argument_or_with_t(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "platform-admin")  # a member of no tenant: it must name one
    for command in (("clusters", "list"), ("quota", "show"), ("quota", "burst"),
                    ("members", "list"), ("quota", "requests")):
        positional = portalctl(*command, "acme", "-o", "json")
        assert positional.exit_code == 0, (command, positional.stderr)
        assert _json(positional) == _json(portalctl(*command, "-t", "acme", "-o", "json"))
    quota = _json(portalctl("quota", "show", "acme", "-o", "json"))
    assert [q["approved_gpus"] for q in quota] == [16]
    usage = portalctl("usage", "acme", "-o", "json")
    assert usage.exit_code == 0 and {r["tenant"] for r in _json(usage)["rows"]} <= {"acme"}

    twice = portalctl("clusters", "list", "acme", "--tenant", "globex")
    assert twice.exit_code == 2
    assert twice.stderr == "error: two tenants given: 'acme' and --tenant 'globex'; give one\n"
    portalctl.env["PORTALCTL_TENANT"] = "globex"  # the positional one wins over the default
    assert _json(portalctl("quota", "show", "acme", "-o", "json")) == quota


def test_a_grant_is_revoked_by_its_id_alone(
    portal_with_ready_cluster: Portal, portalctl: PortalCtl
) -> None:
    portal = portal_with_ready_cluster
    portalctl.login(portal, "acme-admin")
    for role in ("view", "admin"):
        assert portalctl("kubeconfig", "train", "--role", role).exit_code == 0
    view, admin = sorted(_json(portalctl("grants", "list", "-o", "json")),
                         key=lambda g: g["role"] != "view")

    revoked = portalctl("grants", "revoke", str(view["id"]))
    assert (revoked.exit_code, revoked.stdout) == (0, f"Grant {view['id']} revoked.\n")
    assert portalctl("grants", "revoke", "train", str(admin["id"])).exit_code == 0
    assert _json(portalctl("grants", "list", "-o", "json")) == []
    assert portalctl("grants", "revoke", "999999").exit_code == 3
    assert portalctl("grants", "revoke", "train").exit_code == 2

    portalctl.login(portal, "globex-admin")
    hidden = portalctl("grants", "revoke", str(view["id"]))
    assert hidden.exit_code == 3 and "acme" not in hidden.stderr


def test_a_platform_admin_sees_every_tenants_pending_requests_without_naming_one(
    portal: Portal, portalctl: PortalCtl
) -> None:
    with portal.database.transaction() as db:
        tenancy = _tenants(db)
        gpu = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S")
        acme = factories.quota_request(db, tenancy["acme"], gpu)
        globex = factories.quota_request(db, tenancy["globex"], gpu)
        decided = factories.quota_request(db, tenancy["globex"], gpu, state="rejected")
        ids = [acme.id, globex.id, decided.id]
    portalctl.login(portal, "platform-admin")
    queue = _json(portalctl("quota", "requests", "-o", "json"))
    assert [(r["id"], r["tenant"]) for r in queue] == [(ids[0], "acme"), (ids[1], "globex")]
    table = portalctl("quota", "requests").stdout
    assert "acme" in table and "globex" in table

    portalctl.login(portal, "acme-admin")  # a tenant admin still gets its tenant's
    assert [r["id"] for r in _json(portalctl("quota", "requests", "-o", "json"))] == [ids[0]]


def _tenants(db: Session) -> dict[str, Tenant]:
    return {t.slug: t for t in db.scalars(select(Tenant))}


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_refused_value_is_said_in_the_portals_words(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    refused = portalctl("clusters", "create", "Bad_Name", "--gpus", "0")
    assert refused.exit_code == 1
    lines = refused.stderr.splitlines()
    assert lines[0] == "error: the request is invalid"
    assert lines[1].startswith("  name: ") and "error," not in refused.stderr
