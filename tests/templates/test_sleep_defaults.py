"""A template version may carry sleep policy defaults; a new cluster from it takes them, and a
version's edit keeps them unless changed."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from tests import factories
from tests.support.tenancy import Tenancy, headers

TEMPLATES = "/api/v1/cluster-templates"
CLUSTERS = "/api/v1/tenants/acme/clusters"
DEFAULTS: dict[str, Any] = {"sleep_after_idle_minutes": 45, "sleep_schedule": "weekends",
            "sleep_timezone": "Europe/Berlin", "delete_after_sleep_days": 30}


def test_a_new_cluster_takes_its_templates_sleep_defaults(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    template = factories.cluster_template(db, "nightly")
    factories.template_version(db, template, **DEFAULTS)
    db.commit()
    created = app_client.post(CLUSTERS, json={
        "name": "sleepy", "template": "nightly", "placement": "shared-pool",
        "gpu_class_id": tenancy.h100.id, "gpus": 2}, headers=headers(db, tenancy.acme_admin))
    assert created.status_code == 201, created.text
    assert created.json()["sleep_policy"] == {**DEFAULTS, "never_sleep": False,
                                              "idle_measure": "bound",
                                              "deletion_warned_at": None, "deletes_at": None}
    event = db.scalar(select(AuditEvent).where(AuditEvent.action == "virtual_cluster.create"))
    assert event is not None and event.after is not None
    assert event.after["sleep_policy"] == DEFAULTS
    shown = app_client.get(f"{TEMPLATES}/nightly", headers=headers(db, tenancy.acme_viewer))
    assert shown.json()["versions"][0]["sleep_schedule"] == "weekends"


def test_without_defaults_a_new_cluster_has_no_policy(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    created = app_client.post(CLUSTERS, json={
        "name": "plain", "placement": "shared-pool", "gpu_class_id": tenancy.h100.id,
        "gpus": 1}, headers=headers(db, tenancy.acme_admin))
    assert created.status_code == 201, created.text
    cluster = db.get(VirtualCluster, created.json()["id"])
    assert cluster is not None
    assert (cluster.sleep_after_idle_minutes, cluster.sleep_schedule, cluster.sleep_timezone,
            cluster.delete_after_sleep_days, cluster.never_sleep) == (None, None, "UTC", None,
                                                                        False)


def test_an_admin_sets_defaults_on_a_version_and_bad_ones_are_refused(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    admin = headers(db, tenancy.platform_admin)
    created = app_client.post(TEMPLATES, json={"name": "nightly", "settings": DEFAULTS},
                              headers=admin)
    assert created.status_code == 201, created.text
    edited = app_client.post(f"{TEMPLATES}/nightly/versions", json={"default_gpus": 1},
                             headers=admin)
    assert edited.status_code == 201, edited.text
    assert edited.json()["sleep_schedule"] == "weekends"  # copied from v1
    for bad in ({"sleep_schedule": "nightly"}, {"sleep_timezone": "Mars/Olympus"},
                {"sleep_after_idle_minutes": 1}, {"delete_after_sleep_days": 400}):
        refused = app_client.post(f"{TEMPLATES}/nightly/versions", json=bad, headers=admin)
        assert refused.status_code == 422, (bad, refused.text)
        [field] = bad
        assert any(e["field"].endswith(field) for e in refused.json()["errors"]), refused.text


def test_a_versions_idle_measure_is_its_new_clusters_and_a_bad_one_is_refused(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    admin = headers(db, tenancy.platform_admin)
    created = app_client.post(TEMPLATES, json={"name": "frugal", "settings": {
        "sleep_after_idle_minutes": 60, "idle_measure": "utilisation"}}, headers=admin)
    assert created.status_code == 201, created.text
    edited = app_client.post(f"{TEMPLATES}/frugal/versions", json={"default_gpus": 1},
                             headers=admin)
    assert edited.json()["idle_measure"] == "utilisation"  # copied from v1
    refused = app_client.post(f"{TEMPLATES}/frugal/versions", json={"idle_measure": "soon"},
                              headers=admin)
    assert refused.status_code == 422
    assert any(e["field"].endswith("idle_measure") for e in refused.json()["errors"])
    template = factories.cluster_template(db, "offered-frugal")
    factories.template_version(db, template, sleep_after_idle_minutes=60,
                               idle_measure="utilisation")
    db.commit()
    cluster = app_client.post(CLUSTERS, json={
        "name": "frugal", "template": "offered-frugal", "placement": "shared-pool",
        "gpu_class_id": tenancy.h100.id, "gpus": 1}, headers=headers(db, tenancy.acme_admin))
    assert cluster.status_code == 201, cluster.text
    assert cluster.json()["sleep_policy"]["idle_measure"] == "utilisation"
    row = db.get(VirtualCluster, cluster.json()["id"])
    assert row is not None and row.idle_measure == "utilisation"
