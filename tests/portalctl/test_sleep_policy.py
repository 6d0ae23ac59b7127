"""`portalctl clusters sleep-policy`, `sleep` and `wake` against the real app."""

from __future__ import annotations

import json

from sqlalchemy import select

from app.audit.models import AuditEvent
from tests.portalctl.conftest import Portal, PortalCtl


def test_an_admin_changes_what_is_given_and_keeps_the_rest(
        portal_with_ready_cluster: Portal, portalctl: PortalCtl) -> None:
    portal = portal_with_ready_cluster
    portalctl.login(portal, "acme-admin")
    shown = portalctl("clusters", "sleep-policy", "train", "-o", "json")
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["sleep_after_idle_minutes"] is None
    set_ = portalctl("clusters", "sleep-policy", "train", "--idle-minutes", "60", "--schedule",
                     "weekdays 20:00-08:00, weekends", "--timezone", "Europe/Berlin",
                     "--delete-after-days", "30", "-o", "json")
    assert set_.exit_code == 0, set_.stderr
    policy = json.loads(set_.stdout)
    assert (policy["sleep_after_idle_minutes"], policy["sleep_schedule"],
            policy["sleep_timezone"], policy["delete_after_sleep_days"]) == (
        60, "weekdays 20:00-08:00, weekends", "Europe/Berlin", 30)
    kept = json.loads(portalctl("clusters", "sleep-policy", "train", "--never-sleep",
                                "--idle-minutes", "0", "-o", "json").stdout)
    assert kept["never_sleep"] is True and kept["sleep_after_idle_minutes"] is None
    assert kept["sleep_schedule"] == "weekdays 20:00-08:00, weekends"
    with portal.database.session() as db:
        assert len(list(db.scalars(select(AuditEvent).where(
            AuditEvent.action == "virtual_cluster.sleep_policy")))) == 2


def test_a_bad_schedule_says_why(portal_with_ready_cluster: Portal,
                                 portalctl: PortalCtl) -> None:
    portalctl.login(portal_with_ready_cluster, "acme-admin")
    refused = portalctl("clusters", "sleep-policy", "train", "--schedule", "nightly")
    assert refused.exit_code != 0
    assert "sleep_schedule" in refused.stderr and "'nightly' is neither days" in refused.stderr


def test_sleep_and_wake(portal_with_ready_cluster: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal_with_ready_cluster, "acme-admin")
    slept = portalctl("clusters", "sleep", "train", "-o", "json")
    assert slept.exit_code == 0, slept.stderr
    assert json.loads(slept.stdout)["power"]["wanted"] == "asleep"
    woken = portalctl("clusters", "wake", "train", "-o", "json")
    assert json.loads(woken.stdout)["power"]["wanted"] == "awake"


def test_idle_on_utilisation_is_set_kept_and_a_bad_choice_refused(
        portal_with_ready_cluster: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal_with_ready_cluster, "acme-admin")
    set_ = portalctl("clusters", "sleep-policy", "train", "--idle-minutes", "30", "--idle-on",
                     "utilisation", "-o", "json")
    assert set_.exit_code == 0, set_.stderr
    assert json.loads(set_.stdout)["idle_measure"] == "utilisation"
    kept = json.loads(portalctl("clusters", "sleep-policy", "train", "--idle-minutes", "60",
                                "-o", "json").stdout)
    assert (kept["idle_measure"], kept["sleep_after_idle_minutes"]) == ("utilisation", 60)
    refused = portalctl("clusters", "sleep-policy", "train", "--idle-on", "sometimes")
    assert refused.exit_code != 0 and "bound" in refused.stderr and "utilisation" in (
        refused.stderr)
