"""The cluster pages as a user meets them: the dashboard's quota chart agrees with its table,
the conditions timeline, a delete that needs the cluster's name typed, toasts, exact times on
hover and empty states that say what to do next."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.tenants.models import Tenant
from tests import factories
from tests.clusters.test_end_to_end import sign_in_acme_admin
from tests.nodes.test_fleet_pictures import chart_values, table_values
from tests.support.web import HTML, csrf_of, htmx

# "In use" comes from the worker's samples (tests/usage checks it against them).
QUOTA_COLUMNS = {"approved": "approved", "allocated": "allocated"}


def _create(client: TestClient, csrf: str, gpu_id: int, gpus: int = 4) -> None:
    created = client.post("/t/acme/clusters", headers=htmx(csrf),
                          data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": str(gpus)})
    assert created.headers["HX-Redirect"] == "/t/acme/clusters/train"
    assert "provisioning" in created.headers["HX-Trigger"]


def test_the_quota_chart_shows_the_tables_numbers(client: TestClient, db: Session,
                                                  oidc_issuer: str) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    l40s = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S")
    acme = db.scalars(select(Tenant).where(Tenant.slug == "acme")).one()
    factories.quota(db, acme, l40s, 2)
    db.commit()
    _create(client, csrf_of(client.get("/t/acme/clusters", headers=HTML).text), gpu_id)
    page = client.get("/t/acme", headers=HTML).text
    charted = chart_values(page, "quota-chart")
    assert {k: v for k, v in charted.items() if k[1] != "in-use"} == table_values(
        page, "quota", QUOTA_COLUMNS)
    assert charted[("H100 80GB", "in-use")] == 0  # nothing sampled yet, as the table says
    assert page.count('<td class="in-use">not sampled yet</td>') == 2
    assert charted[("H100 80GB", "approved")] == 8 and charted[("H100 80GB", "allocated")] == 4
    assert charted[("L40S", "approved")] == 2
    assert re.search(r'<svg[^>]+id="quota-chart" role="img"', page)


def test_empty_states_name_the_next_step(client: TestClient, db: Session,
                                         oidc_issuer: str) -> None:
    sign_in_acme_admin(db, oidc_issuer, client)
    for path in ("/t/acme", "/t/acme/clusters"):  # a button on one, a form on the other
        page = client.get(path, headers=HTML).text
        assert "No clusters yet: create one with “Create a cluster”" in page, path
        assert re.search(r">\s*Create a cluster\s*<", page), path
    page = client.get("/t/acme", headers=HTML).text
    assert "No requests yet. A platform admin decides each request you send." in page


def test_deleting_needs_the_clusters_name_typed(client: TestClient, db: Session,
                                                oidc_issuer: str) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    _create(client, csrf, gpu_id)
    page = client.get("/t/acme/clusters/train", headers=HTML).text
    assert 'sse-connect="/live/t/acme/clusters/train"' in page
    assert "Type <strong>train</strong> to confirm" in page
    for typed in ("", "trai", "Train", "train2"):
        refused = client.post("/t/acme/clusters/train/delete", headers=htmx(csrf),
                              data={"confirm_name": typed})
        assert refused.status_code == 422
        assert "type the name &#39;train&#39; exactly to confirm; nothing was changed" in (
            refused.text)
        plain = client.post("/t/acme/clusters/train/delete", headers={**HTML,
                                                                       "X-CSRF-Token": csrf},
                            data={"confirm_name": typed})
        assert plain.status_code == 422
    db.expire_all()
    cluster = db.scalars(select(VirtualCluster)).one()
    assert cluster.deletion_requested_at is None  # nothing changed
    deleted = client.post("/t/acme/clusters/train/delete", headers=htmx(csrf),
                          data={"confirm_name": " train "})
    assert deleted.headers["HX-Redirect"] == "/t/acme/clusters/train"
    assert "Deleting cluster train" in deleted.headers["HX-Trigger"]
    db.expire_all()
    assert db.scalars(select(VirtualCluster)).one().deletion_requested_at is not None


def test_the_status_shows_a_timeline_and_exact_times(client: TestClient, db: Session,
                                                     oidc_issuer: str) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    _create(client, csrf_of(client.get("/t/acme/clusters", headers=HTML).text), gpu_id)
    waiting = client.get("/t/acme/clusters/train/status", headers=HTML).text
    assert "conditions-chart" not in waiting  # nothing to draw before the worker reports
    assert "this page updates by itself" in waiting
    since = datetime.now(UTC).replace(microsecond=0)
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    db.execute(update(VirtualCluster).values(conditions=[
        {"type": "NamespaceReady", "status": "True", "reason": "Created", "message": "",
         "lastTransitionTime": stamp, "observedGeneration": 1}]))
    db.commit()
    status = client.get("/t/acme/clusters/train/status", headers=HTML).text
    assert 'hx-trigger="sse:changed, livepoll"' in status
    assert 'data-condition="NamespaceReady" data-status="True"' in status
    exact = since.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f'<time datetime="{stamp}" title="{exact}">just now</time>' in status
