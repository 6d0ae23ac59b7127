"""The template pages: an admin creates, validates and offers a template in the browser's forms;
a tenant's create form asks only what the template leaves open; the upgrade button."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.templates.models import ClusterTemplateVersion
from tests.conftest import ADMIN_GROUP
from tests.support import oidc
from tests.support.tenancy import Tenancy, headers, signed_in_admin_of
from tests.support.web import HTML, csrf_of
from tests.templates.support import KAI_REPO, StandinCharts, run_validations
from tests.templates.test_templates_api import new_offered_version, offered_training


def test_an_admin_makes_validates_and_offers_a_template_in_the_pages(
        host_client: TestClient, db: Session, tenancy: Tenancy, oidc_issuer: str) -> None:
    oidc.register_user(oidc_issuer, tenancy.platform_admin.email, groups=[ADMIN_GROUP])
    oidc.sign_in(host_client, tenancy.platform_admin.email)
    page = host_client.get("/admin/cluster-templates", headers=HTML)
    assert page.status_code == 200 and 'href="/admin/cluster-templates/default"' in page.text
    csrf = {"X-CSRF-Token": csrf_of(page.text)}
    created = host_client.post("/admin/cluster-templates", headers=csrf, follow_redirects=False,
                               data={"name": "training", "description": "dedicated H100",
                                     "placement": "dedicated-nodes",
                                     "kubernetes_version": "1.32.4",
                                     "gpu_class_id": str(tenancy.h100.id), "default_gpus": "8",
                                     "max_gpus": "16", "pod_security": "restricted",
                                     "user_namespaces": "true",
                                     "addons": f"kai-scheduler {KAI_REPO} kai-scheduler 0.9.3"})
    assert created.status_code == 303, created.text
    detail = host_client.get(created.headers["location"], headers=HTML).text
    assert "Not validated yet." in detail and "kai-scheduler: kai-scheduler 0.9.3" in detail
    refused = host_client.post("/admin/cluster-templates/training/versions/1/offer",
                               headers=csrf)
    assert refused.status_code == 409 and "has not passed validation" in refused.text
    queued = host_client.post("/admin/cluster-templates/training/versions/1/validate",
                              headers=csrf, follow_redirects=False)
    assert queued.status_code == 303
    pending = host_client.get("/admin/cluster-templates/training", headers=HTML).text
    assert 'class="validation-pending"' in pending and "data-live-poll" in pending
    fragment = "/admin/cluster-templates/training/versions/1/validation"
    assert f'hx-get="{fragment}"' in pending
    run_validations(host_client)
    polled = host_client.get(fragment, headers=HTML).text
    assert 'class="validation-passed"' in polled and "data-live-poll" not in polled
    validated = host_client.get("/admin/cluster-templates/training", headers=HTML).text
    assert 'class="validation-passed"' in validated
    assert "<strong>host-dry-run</strong>: ok" in validated
    host_client.post("/admin/cluster-templates/training/versions/1/offer", headers=csrf)
    offered = host_client.get("/admin/cluster-templates/training", headers=HTML).text
    assert "state-offered" in offered


def test_a_bad_add_on_line_is_shown_on_the_form(
        app_client: TestClient, db: Session, tenancy: Tenancy, oidc_issuer: str) -> None:
    oidc.register_user(oidc_issuer, tenancy.platform_admin.email, groups=[ADMIN_GROUP])
    oidc.sign_in(app_client, tenancy.platform_admin.email)
    csrf = csrf_of(app_client.get("/admin/cluster-templates", headers=HTML).text)
    refused = app_client.post("/admin/cluster-templates", headers={"X-CSRF-Token": csrf},
                              data={"name": "broken", "addons": "kai http://x kai 1.0"})
    assert refused.status_code == 422
    assert "must be an https:// or oci:// URL" in refused.text


def test_the_create_form_asks_only_what_the_template_leaves_open(
        host_client: TestClient, db: Session, tenancy: Tenancy, oidc_issuer: str) -> None:
    offered_training(host_client, db, tenancy)
    signed_in_admin_of(host_client, db, oidc_issuer, tenancy.acme)
    default_form = host_client.get("/t/acme/clusters", headers=HTML).text
    assert 'name="placement"' in default_form and 'name="gpu_class_id"' in default_form
    form = host_client.get("/t/acme/clusters?template=training", headers=HTML).text
    assert '<option value="training" selected>' in form
    for fixed in ('name="placement"', 'name="gpu_class_id"', 'name="kubernetes_version"'):
        assert fixed not in form
    assert 'max="16"' in form and 'value="8"' in form
    created = host_client.post("/t/acme/clusters", follow_redirects=False,
                               headers={"X-CSRF-Token": csrf_of(form)},
                               data={"name": "big", "template": "training", "gpus": "8",
                                     "cpu_millicores": "4000", "memory_mib": "16384"})
    assert created.status_code == 303, created.text
    cluster = db.scalar(select(VirtualCluster).where(VirtualCluster.name == "big"))
    assert cluster is not None and cluster.placement == "dedicated-nodes"
    assert cluster.user_namespaces is True


def test_the_upgrade_button_moves_the_cluster_to_the_newer_version(
        host_client: TestClient, db: Session, tenancy: Tenancy, oidc_issuer: str) -> None:
    offered_training(host_client, db, tenancy)
    host_client.post("/api/v1/tenants/acme/clusters", json={"name": "big", "template": "training"},
                     headers=headers(db, tenancy.acme_admin))
    new_offered_version(host_client, db, tenancy, kubernetes_version="1.31.8")
    signed_in_admin_of(host_client, db, oidc_issuer, tenancy.acme)
    detail = host_client.get("/t/acme/clusters/big", headers=HTML).text
    assert 'href="/t/acme/clusters/big/template"' in detail
    page = host_client.get("/t/acme/clusters/big/template", headers=HTML).text
    assert "training v1 (offered)" in page and "Upgrade to v2" in page
    upgraded = host_client.post("/t/acme/clusters/big/template-upgrade", follow_redirects=False,
                                headers={"X-CSRF-Token": csrf_of(page)}, data={"version": "2"})
    assert upgraded.status_code == 303
    db.expire_all()
    cluster = db.scalar(select(VirtualCluster).where(VirtualCluster.name == "big"))
    assert cluster is not None
    assert (cluster.kubernetes_version, cluster.generation) == ("1.31.8", 2)
    assert "This is the newest offered version." in host_client.get(
        "/t/acme/clusters/big/template", headers=HTML).text


def test_addon_settings_are_written_in_the_form_and_checked_against_the_charts_schema(
        host_client: TestClient, db: Session, tenancy: Tenancy, oidc_issuer: str,
        charts: StandinCharts) -> None:
    charts.schemas[(KAI_REPO, "kai-scheduler", "0.9.3")] = {
        "type": "object", "properties": {"scheduler": {"type": "object", "properties": {
            "replicas": {"type": "integer", "minimum": 1}}}}}
    oidc.register_user(oidc_issuer, tenancy.platform_admin.email, groups=[ADMIN_GROUP])
    oidc.sign_in(host_client, tenancy.platform_admin.email)
    csrf = {"X-CSRF-Token": csrf_of(host_client.get("/admin/cluster-templates",
                                                    headers=HTML).text)}
    line = (f'kai-scheduler {KAI_REPO} kai-scheduler 0.9.3 scheduler.replicas=2 '
            'global.gpuSharing=true image.tag="2"')
    created = host_client.post("/admin/cluster-templates", headers=csrf, follow_redirects=False,
                               data={"name": "training", "placement": "dedicated-nodes",
                                     "default_gpus": "8", "pod_security": "restricted",
                                     "addons": line})
    assert created.status_code == 303, created.text
    page = host_client.get("/admin/cluster-templates/training", headers=HTML).text
    assert ('<code class="addon-settings" data-addon="kai-scheduler">scheduler.replicas=2 '
            'global.gpuSharing=true image.tag="2"</code>') in page
    # The new-version form starts from the newest version, settings included.
    textarea = re.search(r'<textarea name="addons"[^>]*>([^<]*)</textarea>', page)
    assert textarea is not None and html.unescape(textarea.group(1)) == line

    edited = line.replace("scheduler.replicas=2", "scheduler.replicas=0")
    host_client.post("/admin/cluster-templates/training/versions", headers=csrf,
                     data={"placement": "dedicated-nodes", "default_gpus": "8",
                           "pod_security": "restricted", "addons": edited})
    stored = host_client.get("/api/v1/cluster-templates/training",
                             headers=headers(db, tenancy.platform_admin)).json()["versions"]
    assert [v["addons"][0]["settings"]["scheduler.replicas"] for v in stored] == [2, 0]
    assert stored[1]["addons"][0]["settings"]["image.tag"] == "2"  # text, as quoted

    host_client.post("/admin/cluster-templates/training/versions/2/validate", headers=csrf)
    run_validations(host_client)
    result = host_client.get("/admin/cluster-templates/training/versions/2/validation",
                             headers=HTML).text
    assert 'class="validation-failed"' in result
    assert ("add-on kai-scheduler: setting scheduler.replicas: 0 is less than the minimum of 1 "
            "(values.schema.json of kai-scheduler 0.9.3)") in html.unescape(result)


def test_the_create_form_shows_a_template_the_moment_it_is_offered_and_a_create_reads_afresh(
        host_client: TestClient, db: Session, tenancy: Tenancy, oidc_issuer: str) -> None:
    signed_in_admin_of(host_client, db, oidc_issuer, tenancy.acme)
    assert 'value="training"' not in host_client.get("/t/acme/clusters", headers=HTML).text
    offered_training(host_client, db, tenancy)  # the catalogue shown a moment ago is forgotten
    form = host_client.get("/t/acme/clusters", headers=HTML).text
    assert '>training v1</option>' in form
    # Retired below the ORM, as another process would: the form may still list it for a moment,
    # but a create from it is refused.
    db.connection().execute(update(ClusterTemplateVersion).values(state="retired"))
    db.commit()
    refused = host_client.post("/t/acme/clusters", follow_redirects=False,
                               headers={"X-CSRF-Token": csrf_of(form)},
                               data={"name": "big", "template": "training", "gpus": "8",
                                     "cpu_millicores": "4000", "memory_mib": "16384"})
    assert refused.status_code == 422 and "no offered cluster template training" in refused.text
    assert db.scalar(select(VirtualCluster).where(VirtualCluster.name == "big")) is None
