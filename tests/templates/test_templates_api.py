"""Cluster templates over the REST API: an admin makes, validates and offers one; a tenant creates
a cluster from it choosing only name and size; a cluster keeps its version until upgraded."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from tests import factories
from tests.support.tenancy import Tenancy, headers
from tests.templates.support import (
    KAI_REPO,
    VCLUSTER_CHART,
    StandinCharts,
    training,
    validate_in_worker,
)

TEMPLATES = "/api/v1/cluster-templates"
CLUSTERS = "/api/v1/tenants/acme/clusters"


def offered_training(client: TestClient, db: Session, tenancy: Tenancy,
                     **overrides: Any) -> dict[str, Any]:
    admin = headers(db, tenancy.platform_admin)
    created = client.post(TEMPLATES, json=training(tenancy.h100.id, **overrides), headers=admin)
    assert created.status_code == 201, created.text
    assert validate_in_worker(client, admin, "training", 1)["validation"]["passed"]
    offered = client.post(f"{TEMPLATES}/training/versions/1/offer", headers=admin)
    assert offered.status_code == 200, offered.text
    body: dict[str, Any] = offered.json()
    return body


def new_offered_version(client: TestClient, db: Session, tenancy: Tenancy,
                        **changes: Any) -> int:
    admin = headers(db, tenancy.platform_admin)
    made = client.post(f"{TEMPLATES}/training/versions", json=changes, headers=admin)
    assert made.status_code == 201, made.text
    number = int(made.json()["version"])
    assert validate_in_worker(client, admin, "training", number)["validation"]["passed"]
    assert client.post(f"{TEMPLATES}/training/versions/{number}/offer",
                       headers=admin).status_code == 200
    return number


def actions(db: Session, prefix: str) -> list[str]:
    db.expire_all()
    return list(db.scalars(select(AuditEvent.action).where(AuditEvent.action.startswith(prefix))
                          .order_by(AuditEvent.id)))


# ----- the "done when"


def test_training_template_passes_validation_on_the_real_host_and_is_offered(
        host_client: TestClient, db: Session, tenancy: Tenancy, charts: StandinCharts) -> None:
    version = offered_training(host_client, db, tenancy)
    assert version["state"] == "offered" and version["gpu_class"] == "NVIDIA-H100-80GB-HBM3"
    checks = {c["name"]: c for c in version["validation"]["checks"]}
    assert set(checks) == {"render", "chart-schema", "edition", "allowlist", "host-dry-run",
                           "host-support", "addons"}
    assert all(c["passed"] and c["reasons"] == [] for c in checks.values()), checks
    # the pinned vCluster chart, for its values schema; the add-on's chart
    assert charts.asked == [VCLUSTER_CHART, (KAI_REPO, "kai-scheduler", "0.9.3")]
    assert actions(db, "cluster_template.") == [
        "cluster_template.create", "cluster_template.validation_requested",
        "cluster_template.validate", "cluster_template.offer"]


def test_a_tenant_creates_a_cluster_choosing_only_name_and_size(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    offered_training(host_client, db, tenancy)
    tenant = headers(db, tenancy.acme_admin)
    listed = host_client.get(TEMPLATES, headers=tenant).json()
    assert [(t["name"], t["latest_offered"]) for t in listed] == [("default", 1), ("training", 1)]
    created = host_client.post(CLUSTERS, json={"name": "big", "template": "training"},
                               headers=tenant)
    assert created.status_code == 201, created.text
    cluster = created.json()
    assert (cluster["placement"], cluster["gpu_class"], cluster["kubernetes_version"],
            cluster["gpus"], cluster["pod_security"], cluster["user_namespaces"]) == (
        "dedicated-nodes", "NVIDIA-H100-80GB-HBM3", "1.32.4", 8, "restricted", True)
    manifests = host_client.get(f"{CLUSTERS}/big/manifests", headers=tenant).json()
    namespace = manifests["objects"][0]["metadata"]["labels"]
    assert namespace["gpu-tenant-portal/hardening"] == "user-namespaces"
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"


def test_a_value_the_template_fixes_is_refused_and_nothing_is_made(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    offered_training(host_client, db, tenancy)
    tenant = headers(db, tenancy.acme_admin)
    for field, value in (("placement", "shared-pool"), ("kubernetes_version", "1.31.8"),
                         ("gpu_class_id", tenancy.h100.id)):
        refused = host_client.post(CLUSTERS, json={"name": "big", "template": "training",
                                                   field: value}, headers=tenant)
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert problem["errors"] == [{"field": field, "message": problem["detail"]}]
        assert "template training v1 fixes" in problem["detail"]
    too_big = host_client.post(CLUSTERS, json={"name": "big", "template": "training",
                                               "gpus": 17}, headers=tenant)
    assert too_big.status_code == 422 and "at most 16 GPUs" in too_big.json()["detail"]
    assert db.scalar(select(VirtualCluster).where(VirtualCluster.name == "big")) is None


def test_without_a_template_clusters_come_from_the_default_one(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    created = app_client.post(CLUSTERS, json={
        "name": "free", "placement": "shared-pool", "gpu_class_id": tenancy.h100.id, "gpus": 2,
        "kubernetes_version": "1.31.8"}, headers=headers(db, tenancy.acme_admin))
    assert created.status_code == 201, created.text
    default = app_client.get(f"{TEMPLATES}/default",
                             headers=headers(db, tenancy.acme_viewer)).json()
    assert default["versions"][0]["placement"] is None  # everything open, as before templates
    cluster = db.get(VirtualCluster, created.json()["id"])
    assert cluster is not None and cluster.template_version_id is not None
    assert (cluster.kubernetes_version, cluster.pod_security, cluster.user_namespaces) == (
        "1.31.8", None, False)


# ----- versions


def test_a_cluster_made_from_v1_keeps_it_after_v2_is_offered_until_upgraded(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    offered_training(host_client, db, tenancy)
    tenant = headers(db, tenancy.acme_admin)
    created = host_client.post(CLUSTERS, json={"name": "big", "template": "training"},
                               headers=tenant).json()
    v2 = new_offered_version(host_client, db, tenancy, kubernetes_version="1.31.8",
                             pod_security="baseline")
    assert v2 == 2
    kept = host_client.get(f"{CLUSTERS}/big", headers=tenant).json()
    assert (kept["template_version_id"], kept["kubernetes_version"], kept["generation"]) == (
        created["template_version_id"], "1.32.4", 1)
    # New clusters get v2; v1 can still be asked for while it is offered.
    newer = host_client.post(CLUSTERS, json={"name": "new", "template": "training"},
                             headers=tenant).json()
    assert newer["kubernetes_version"] == "1.31.8"

    upgraded = host_client.post(f"{CLUSTERS}/big/template-upgrade", json={}, headers=tenant)
    assert upgraded.status_code == 200, upgraded.text
    after = upgraded.json()
    assert (after["kubernetes_version"], after["pod_security"], after["generation"]) == (
        "1.31.8", "baseline", 2)
    assert after["template_version_id"] == newer["template_version_id"]
    event = db.scalar(select(AuditEvent).where(
        AuditEvent.action == "virtual_cluster.template_upgrade"))
    assert event is not None and event.tenant_id == tenancy.acme.id
    assert event.before is not None and event.after is not None
    assert (event.before["kubernetes_version"], event.after["template"]) == (
        "1.32.4", "training v2")
    again = host_client.post(f"{CLUSTERS}/big/template-upgrade", json={}, headers=tenant)
    assert again.status_code == 409 and "not newer" in again.json()["detail"]


def test_an_upgrade_that_hardens_pods_is_refused_on_a_host_without_a_webhook_url(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    """Placement keeps hardened clusters off such hosts; an upgrade cannot bring one there:
    the host's hardening guard would refuse every new pod of the cluster."""
    offered_training(host_client, db, tenancy)
    tenant = headers(db, tenancy.acme_admin)
    created = host_client.post(CLUSTERS, json={"name": "big", "template": "training"},
                               headers=tenant).json()
    new_offered_version(host_client, db, tenancy, pod_security="baseline")
    # The cluster sits on a host registered without a webhook URL (one cleared since, say).
    remote = factories.registered_host(db, "gpu-us-1", webhook=False)
    cluster = db.get(VirtualCluster, created["id"])
    assert cluster is not None
    cluster.host_cluster_id = remote.id
    db.flush()

    refused = host_client.post(f"{CLUSTERS}/big/template-upgrade", json={}, headers=tenant)
    assert refused.status_code == 409, refused.text
    detail = refused.json()["detail"]
    assert "gpu-us-1" in detail and "webhook URL" in detail
    kept = host_client.get(f"{CLUSTERS}/big", headers=tenant).json()
    assert (kept["template_version_id"], kept["pod_security"], kept["generation"]) == (
        created["template_version_id"], created["pod_security"], 1)
    assert actions(db, "virtual_cluster.template_upgrade") == []

    remote.webhook_url = "https://webhook.gpu-us-1.example:9443"
    db.flush()
    upgraded = host_client.post(f"{CLUSTERS}/big/template-upgrade", json={}, headers=tenant)
    assert upgraded.status_code == 200, upgraded.text
    assert (upgraded.json()["pod_security"], upgraded.json()["generation"]) == ("baseline", 2)


def test_an_edit_is_a_new_draft_and_offered_versions_never_change(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    offered_training(host_client, db, tenancy)
    admin = headers(db, tenancy.platform_admin)
    made = host_client.post(f"{TEMPLATES}/training/versions", json={"max_gpus": 8},
                            headers=admin).json()
    assert (made["version"], made["state"], made["max_gpus"], made["placement"],
            made["validation"]) == (2, "draft", 8, "dedicated-nodes", None)
    template = host_client.get(f"{TEMPLATES}/training", headers=admin).json()
    assert [(v["version"], v["state"], v["max_gpus"]) for v in template["versions"]] == [
        (1, "offered", 16), (2, "draft", 8)]
    # Tenants see only what is offered.
    shown = host_client.get(f"{TEMPLATES}/training", headers=headers(db, tenancy.acme_admin))
    assert [v["version"] for v in shown.json()["versions"]] == [1]
    refused = host_client.post(f"{TEMPLATES}/training/versions/1/offer", headers=admin)
    assert refused.status_code == 409
    below_default = host_client.post(f"{TEMPLATES}/training/versions", json={"max_gpus": 4},
                                     headers=admin)
    assert below_default.status_code == 422
    assert "max_gpus must be at least default_gpus" in below_default.json()["detail"]


def test_a_draft_or_retired_version_cannot_be_picked(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    offered_training(host_client, db, tenancy)
    admin, tenant = headers(db, tenancy.platform_admin), headers(db, tenancy.acme_admin)
    host_client.post(f"{TEMPLATES}/training/versions", json={"max_gpus": 8}, headers=admin)
    draft = host_client.post(CLUSTERS, json={"name": "a", "template": "training",
                                             "template_version": 2}, headers=tenant)
    assert draft.status_code == 422 and draft.json()["errors"][0]["field"] == "template_version"
    assert host_client.post(f"{TEMPLATES}/training/versions/1/retire",
                            headers=admin).status_code == 200
    retired_event = db.scalar(select(AuditEvent).where(
        AuditEvent.action == "cluster_template.retire"))
    assert retired_event is not None and retired_event.after == {"version": 1,
                                                                 "state": "retired"}
    retired = host_client.post(CLUSTERS, json={"name": "a", "template": "training"},
                               headers=tenant)
    assert retired.status_code == 422 and "no offered cluster template" in retired.text
    assert host_client.get(f"{TEMPLATES}/training", headers=tenant).status_code == 404


def test_the_default_template_keeps_an_offered_version(
        app_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    refused = app_client.post(f"{TEMPLATES}/default/versions/1/retire",
                              headers=headers(db, tenancy.platform_admin))
    assert refused.status_code == 409 and "must keep one offered" in refused.json()["detail"]


# ----- who may do what


def test_only_platform_admins_write_templates(host_client: TestClient, db: Session,
                                              tenancy: Tenancy) -> None:
    tenant = headers(db, tenancy.acme_admin)
    assert host_client.post(TEMPLATES, json=training(tenancy.h100.id),
                            headers=tenant).status_code == 403
    read_only = headers(db, tenancy.platform_admin, "read")
    assert host_client.post(TEMPLATES, json=training(tenancy.h100.id),
                            headers=read_only).status_code == 403
    assert host_client.get(TEMPLATES, headers=tenant).json()[0]["name"] == "default"


def test_another_tenant_and_a_member_cannot_upgrade_acmes_cluster(
        host_client: TestClient, db: Session, tenancy: Tenancy) -> None:
    offered_training(host_client, db, tenancy)
    host_client.post(CLUSTERS, json={"name": "big", "template": "training"},
                     headers=headers(db, tenancy.acme_admin))
    new_offered_version(host_client, db, tenancy, max_gpus=12)
    url = f"{CLUSTERS}/big/template-upgrade"
    assert host_client.post(url, json={}, headers=headers(db, tenancy.globex_admin)
                            ).status_code == 404
    assert host_client.post(url, json={}, headers=headers(db, tenancy.acme_member)
                            ).status_code == 403
    assert actions(db, "virtual_cluster.template_upgrade") == []
