"""A template's add-ons on its clusters: the Helm values come from the settings the platform
admin wrote into the template version and nothing else; a cluster made from it, or upgraded to
a version without an add-on, gets exactly the version's add-ons, which the reconciler installs
and uninstalls."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.templates.addons import addon_values
from tests.clusters.support import Harness
from tests.support.tenancy import Tenancy, headers
from tests.support.web import HTML
from tests.templates.support import KAI_ADDON, training
from tests.templates.test_templates_api import (
    CLUSTERS,
    TEMPLATES,
    new_offered_version,
    offered_training,
)

KAI_SETTINGS: dict[str, str | int | bool] = {
    "scheduler.replicas": 2, "queues.default": "team-a", "global.gpuSharing": True}
KAI_VALUES = {"scheduler": {"replicas": 2}, "queues": {"default": "team-a"},
              "global": {"gpuSharing": True}}


def test_addon_values_nest_the_dotted_settings() -> None:
    assert addon_values(KAI_SETTINGS) == KAI_VALUES
    assert addon_values({}) == {}
    with pytest.raises(ValueError, match="value and a section"):
        addon_values({"scheduler": 1, "scheduler.replicas": 2})


@pytest.mark.parametrize("addon_settings", [
    {"scheduler replicas": 2},  # not a dotted name
    {"scheduler": 1, "scheduler.replicas": 2},  # a value and a section at once
    {"note": "two\nlines"},
    {"image": {"tag": "latest"}},  # a nested object: settings are flat, dotted
])
def test_a_bad_addon_setting_is_refused_with_a_reason(
        app_client: TestClient, db: Session, tenancy: Tenancy,
        addon_settings: dict[str, object]) -> None:
    posted = training(tenancy.h100.id, addons=[{**KAI_ADDON, "settings": addon_settings}])
    refused = app_client.post(TEMPLATES, json=posted, headers=headers(db, tenancy.platform_admin))
    assert refused.status_code == 422, refused.text
    assert any(e["field"].startswith("settings.addons.0.settings")
               for e in refused.json()["errors"]), refused.json()


def test_a_cluster_gets_the_versions_addons_with_values_from_the_template_only(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    offered_training(host_client, db, tenancy, addons=[{**KAI_ADDON, "settings": KAI_SETTINGS}])
    tenant = headers(db, tenancy.acme_admin)
    for sneaked in ({"addons": [{**KAI_ADDON, "values": {"image": "evil"}}]},
                    {"values": {"scheduler": {"replicas": 99}}}):
        refused = host_client.post(CLUSTERS, json={"name": "big", "template": "training",
                                                   **sneaked}, headers=tenant)
        assert refused.status_code == 422, refused.text
    created = host_client.post(CLUSTERS, json={"name": "team-a-big", "template": "training"},
                               headers=tenant)
    assert created.status_code == 201, created.text
    cluster = db.get(VirtualCluster, created.json()["id"])
    assert cluster is not None
    assert cluster.addons == [{**KAI_ADDON, "values": KAI_VALUES}]
    # The tenant's own words (the cluster's name, the tenant) are nowhere in the values.
    values = json.dumps(cluster.addons[0]["values"])
    assert "team-a-big" not in values and "acme" not in values


def test_the_reconciler_installs_the_templates_addon_and_uninstalls_it_after_an_upgrade(
        host_client: TestClient, db: Session, database: Database, tenancy: Tenancy) -> None:
    offered_training(host_client, db, tenancy, addons=[{**KAI_ADDON, "settings": KAI_SETTINGS}])
    tenant = headers(db, tenancy.acme_admin)
    created = host_client.post(CLUSTERS, json={"name": "big", "template": "training"},
                               headers=tenant).json()
    harness = Harness.build(database)
    harness.converge(3)
    assert harness.installer.addon_calls == [("install", "kai-scheduler")]
    assert harness.installer.addons["kai-scheduler"].values == KAI_VALUES
    shown = host_client.get(f"{CLUSTERS}/big", headers=tenant).json()["conditions"]
    kai = cond.addon_type("kai-scheduler")
    assert [(c["type"], c["status"]) for c in shown if c["type"] == kai] == [(kai, "True")]
    page = host_client.get("/t/acme/clusters/big", headers={**tenant, **HTML})
    assert page.status_code == 200 and f'data-condition="{kai}"' in page.text

    new_offered_version(host_client, db, tenancy, addons=[])
    upgraded = host_client.post(f"{CLUSTERS}/big/template-upgrade", json={}, headers=tenant)
    assert upgraded.status_code == 200, upgraded.text
    event = db.scalar(select(AuditEvent).where(
        AuditEvent.action == "virtual_cluster.template_upgrade"))
    assert event is not None and event.before is not None and event.after is not None
    assert (event.before["addons"], event.after["addons"]) == (
        ["kai-scheduler kai-scheduler 0.9.3"], [])
    harness.converge(3)
    assert harness.installer.addon_calls == [("install", "kai-scheduler"),
                                             ("uninstall", "kai-scheduler")]
    after = harness.cluster(created["id"])
    assert after is not None and after.addons == []
    assert cond.find(after.conditions, kai) is None
