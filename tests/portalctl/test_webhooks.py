"""`portalctl webhooks` against the real app: a tenant admin registers an endpoint (its secret
printed once), lists it, sends a test and deletes it; a platform admin does the same for the
platform's; a refused address says why."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from app.audit.models import AuditEvent
from tests.portalctl.conftest import Portal, PortalCtl, Result

# A literal public address: registering it asks no DNS.
URL = "https://93.184.216.34/portal"


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_tenant_admin_creates_lists_tests_and_deletes_a_webhook(
        portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    created = portalctl("webhooks", "create", "ops", URL, "--kind", "cluster.ready",
                        "--kind", "cluster.failed")
    assert created.exit_code == 0, created.stderr
    secret = next(line.split()[1] for line in created.stdout.splitlines()
                  if line.startswith("secret:"))
    assert secret.startswith("whsec_") and "not be shown again" in created.stderr
    (listed,) = _json(portalctl("webhooks", "list", "-o", "json"))
    assert (listed["name"], listed["kinds"], listed["state"]) == (
        "ops", ["cluster.ready", "cluster.failed"], "ok")
    table = portalctl("webhooks", "list").stdout
    assert "ops" in table and URL in table and secret not in table
    sent = portalctl("webhooks", "test", str(listed["id"]))
    assert sent.exit_code == 0 and "webhook-id" in sent.stdout
    (pending,) = _json(portalctl("webhooks", "list", "-o", "json"))
    assert pending["pending"] == 1 and pending["recent_deliveries"][0]["kind"] == "test"
    assert portalctl("webhooks", "delete", str(listed["id"]), "--yes").exit_code == 0
    assert _json(portalctl("webhooks", "list", "-o", "json")) == []
    with portal.database.session() as db:
        trail = db.scalars(select(AuditEvent).where(
            AuditEvent.action.like("webhook_endpoint.%")).order_by(AuditEvent.id)).all()
    assert [e.action for e in trail] == [
        "webhook_endpoint.create", "webhook_endpoint.test", "webhook_endpoint.delete"]
    assert secret not in json.dumps([[e.before, e.after] for e in trail])


def test_a_refused_address_says_why_and_a_member_may_not(
        portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    refused = portalctl("webhooks", "create", "ops", "https://169.254.169.254/")
    assert refused.exit_code != 0 and "cloud metadata address" in refused.stderr
    plain = portalctl("webhooks", "create", "ops", "http://93.184.216.34/")
    assert plain.exit_code != 0 and "https://" in plain.stderr
    portalctl.login(portal, "acme-viewer")
    assert portalctl("webhooks", "list", "--tenant", "acme").exit_code == 4


def test_a_platform_admin_manages_the_platforms_webhooks(
        portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "platform-admin")
    made = _json(portalctl("webhooks", "create", "fleet", URL, "--platform", "--format",
                           "slack", "--kind", "host.unreachable", "-o", "json"))
    assert made["tenant"] is None and made["secret"].startswith("whsec_")
    rolled = _json(portalctl("webhooks", "roll-secret", str(made["id"]), "--platform",
                             "-o", "json"))
    assert rolled["secret"] != made["secret"]
    (listed,) = _json(portalctl("webhooks", "list", "--platform", "-o", "json"))
    assert listed["previous_secret_until"] is not None and "secret" not in listed
    assert portalctl("webhooks", "test", str(made["id"]), "--platform").exit_code == 0
    assert portalctl("webhooks", "delete", str(made["id"]), "--platform", "-y").exit_code == 0
    both = portalctl("webhooks", "list", "--platform", "--tenant", "acme")
    assert both.exit_code == 2 and "not both" in both.stderr
