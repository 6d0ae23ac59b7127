"""The clusters pages: inline validation of the create form, who sees which controls."""

from __future__ import annotations

import itertools
import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.database.core import Database
from app.gpu_classes.models import GpuClass
from app.tenants.models import Tenant
from tests import factories
from tests.clusters.test_end_to_end import sign_in_acme_admin
from tests.support.sql import assert_flat, at_two_sizes, one_request
from tests.support.web import HTML, csrf_of


def test_the_create_form_checks_fields_inline(client: TestClient, db: Session,
                                              oidc_issuer: str) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    page = client.get("/t/acme/clusters", headers=HTML)
    assert 'hx-post="/t/acme/clusters/validate"' in page.text
    csrf = csrf_of(page.text)
    checked = client.post("/t/acme/clusters/validate",
                          headers={"HX-Request": "true", "X-CSRF-Token": csrf,
                                   "HX-Trigger-Name": "gpus"},
                          data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "9"})
    assert checked.status_code == 422
    assert "8 are left for shared-pool clusters, 9 asked" in checked.text
    bad_name = client.post("/t/acme/clusters", headers={"HX-Request": "true",
                                                        "X-CSRF-Token": csrf},
                           data={"name": "Not_A_Label", "gpus": "0"})
    assert bad_name.status_code == 422
    assert re.search(r'id="name-error"[^>]*>[^<]*DNS-1123', bad_name.text)
    assert "No clusters yet" in client.get("/t/acme/clusters", headers=HTML).text


def test_resize_errors_are_shown_on_the_page(client: TestClient, db: Session,
                                             oidc_issuer: str) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf}, follow_redirects=False,
                data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "4"})
    page = client.get("/t/acme/clusters/train", headers=HTML).text
    assert 'id="resize-form"' in page and 'name="confirm_name"' in page
    refused = client.post("/t/acme/clusters/train/resize", headers={**HTML, "X-CSRF-Token": csrf},
                          data={"gpus": "12", "cpu_millicores": "4000", "memory_mib": "16384"})
    assert refused.status_code == 422 and 'id="gpus-error"' in refused.text


def test_the_tenant_dashboard_lists_the_clusters(client: TestClient, db: Session,
                                                 oidc_issuer: str) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    client.post("/t/acme/clusters", headers={"X-CSRF-Token": csrf}, follow_redirects=False,
                data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "4"})
    dashboard = client.get("/t/acme", headers=HTML).text
    assert 'href="/t/acme/clusters/train"' in dashboard
    assert 'data-cluster="train"' in dashboard


def test_the_create_form_answers_nothing_about_a_hidden_tenant(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    htmx = {"HX-Request": "true", "X-CSRF-Token": csrf}
    marker = "<img src=x onerror=alert(1)>"
    hidden = f"globex\">{marker}"
    for path in (f"/t/{hidden}/clusters/validate", f"/t/{hidden}/clusters"):
        # An invalid form used to be rendered back, slug and all, before any tenant check.
        refused = client.post(path, headers=htmx, data={"name": "Not_A_Label"})
        assert refused.status_code == 404, (path, refused.status_code)
        assert refused.headers["content-type"].startswith("application/problem+json")


def test_a_viewer_gets_no_create_form_feedback(client: TestClient, db: Session,
                                               oidc_issuer: str) -> None:
    from app.auth.models import User
    from tests import factories
    from tests.support import oidc

    acme = factories.tenant(db, "acme")
    viewer = User(email="vic@acme.example", name="")
    db.add(viewer)
    db.flush()
    factories.membership(db, acme, viewer, "viewer")
    db.commit()
    oidc.register_user(oidc_issuer, "vic@acme.example")
    oidc.sign_in(client, "vic@acme.example")
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    refused = client.post("/t/acme/clusters/validate",
                          headers={"HX-Request": "true", "X-CSRF-Token": csrf},
                          data={"name": "Not_A_Label"})
    assert refused.status_code == 403


def test_status_of_a_hidden_tenant_is_a_404_even_over_htmx(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    sign_in_acme_admin(db, oidc_issuer, client)
    for slug in ("globex", "x\u20ac"):
        found = client.get(f"/t/{slug}/clusters/train/status", headers={"HX-Request": "true"})
        assert found.status_code == 404, (slug, found.status_code)
        assert "hx-redirect" not in found.headers
    gone = client.get("/t/acme/clusters/train/status", headers={"HX-Request": "true"})
    assert gone.status_code == 200 and gone.headers["hx-redirect"] == "/t/acme/clusters"


def test_the_clusters_page_costs_the_same_for_3_clusters_or_30(
    client: TestClient, db: Session, database: Database, oidc_issuer: str,
) -> None:
    sign_in_acme_admin(db, oidc_issuer, client)
    acme = db.scalars(select(Tenant).where(Tenant.slug == "acme")).one()
    host, numbers = factories.host_cluster(db), itertools.count()

    def add() -> None:
        n = next(numbers)
        gpu = factories.gpu_class(db, f"GPU-{n}")
        factories.cluster(db, acme, host, f"c{n}", gpu_class_id=gpu.id)

    costs = at_two_sizes(db, add, lambda: one_request(database, client, "/t/acme/clusters",
                                                      HTML))
    assert_flat(*costs, budget=6)


def test_a_private_nodes_cluster_shows_its_machines_and_their_nodes(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    """On its page (live part) and in the API: each machine, its GPUs, state and node."""
    gpu_class_id = sign_in_acme_admin(db, oidc_issuer, client)
    acme = db.scalar(select(Tenant).where(Tenant.slug == "acme"))
    assert acme is not None
    host = factories.env_host(db)
    gpu = db.get(GpuClass, gpu_class_id)
    assert gpu is not None
    cluster = factories.cluster(db, acme, host, "metal", placement="private-nodes",
                                gpu_class_id=gpu_class_id, gpus=16)
    factories.machine(db, host, gpu, "m-joined", cluster_id=cluster.id, desired="private",
                      phase="joined", node_name="m-joined")
    factories.machine(db, host, gpu, "m-leaving", cluster_id=cluster.id, desired="pool",
                      phase="deprovisioning")
    factories.machine(db, host, gpu, "m-free", phase="available")
    db.commit()

    page = client.get("/t/acme/clusters/metal", headers=HTML).text
    rows = re.findall(r'<tr data-machine="([^"]+)">(.*?)</tr>', page, re.S)
    assert [name for name, _ in rows] == ["m-joined", "m-leaving"]
    assert "joined" in rows[0][1] and "m-joined</td>" in rows[0][1]
    assert "leaving" in rows[1][1]
    csrf = csrf_of(page)
    token = client.post("/tokens", headers={"X-CSRF-Token": csrf},
                        data={"name": "t", "scopes": "read", "expires_in_days": "1"})
    secret = re.search(r"gtp_[A-Za-z0-9_\-]+", token.text)
    assert secret is not None
    shown = client.get("/api/v1/tenants/acme/clusters/metal",
                       headers={"Authorization": f"Bearer {secret.group(0)}"}).json()
    assert shown["private_nodes"] == [
        {"machine": "m-joined", "gpus": 8, "phase": "joined", "node": "m-joined",
         "leaving": False},
        {"machine": "m-leaving", "gpus": 8, "phase": "deprovisioning", "node": None,
         "leaving": True}]
