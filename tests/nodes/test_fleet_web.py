"""The fleet pages in the browser's shoes: sign in, filter nodes over htmx, get a suggestion,
edit it, accept it, end an assignment from the node page; tenants see their own nodes."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.gpu_classes.models import GpuClass
from app.tenants.models import Tenant
from tests import factories
from tests.nodes.conftest import Synced
from tests.support import oidc
from tests.support.principals import bearer
from tests.support.web import HTML, csrf_of, htmx

H100 = "NVIDIA-H100-80GB-HBM3"






def _acme_with_h100_quota(db: Session, gpus: int) -> None:
    acme = factories.tenant(db, "acme")
    h100 = db.scalar(select(GpuClass).where(GpuClass.product == H100))
    assert h100 is not None
    factories.quota(db, acme, h100, gpus=gpus)
    db.commit()


def _tenants_column(page: str) -> dict[str, str]:
    rows = re.findall(r'data-node="([^"]+)">.*?<td class="tenant">([^<]*)</td>', page, re.S)
    return dict(rows)


def test_fleet_suggest_edit_accept_and_end(synced: Synced, client: TestClient,
                                           db: Session) -> None:
    _acme_with_h100_quota(db, gpus=24)
    oidc.sign_in(client, "admin@example.com")
    fleet = client.get("/admin/fleet", headers=HTML)
    assert fleet.status_code == 200
    assert 'id="no-cluster"' in fleet.text  # the test app has no host cluster configured
    assert re.search(rf'data-gpu-class="{H100}">.*?class="total">64<.*?class="not-ready">8<',
                     fleet.text, re.S)
    assert re.search(r"nvidia.com/mig-1g.10gb</code> \S 14", fleet.text)
    csrf = csrf_of(fleet.text)

    everything = client.get("/admin/fleet?gpu_class=&zone=&rack=&tenant=&ready=",
                            headers=htmx(csrf))
    assert len(_tenants_column(everything.text)) == 16
    filtered = client.get("/admin/fleet?ready=false", headers=htmx(csrf))
    assert filtered.text.lstrip().startswith('<div id="node-table"')
    assert list(_tenants_column(filtered.text)) == ["h100-r2-n4"]

    suggested = client.post("/admin/fleet/suggest", headers=htmx(csrf),
                            data={"tenant": "acme", "gpu_class": H100, "gpus": "16"})
    assert suggested.status_code == 200
    checked = re.findall(r'name="node" value="([^"]+)" checked', suggested.text)
    assert checked == ["h100-r2-n1", "h100-r2-n2"]
    assert 'value="h100-r1-n1"' in suggested.text  # other free nodes can be added
    # the admin edits the suggestion: drops one suggested node, adds another
    accepted = client.post("/admin/fleet/assignments", headers=htmx(csrf),
                           data={"tenant": "acme", "node": ["h100-r2-n1", "h100-r2-n3"]})
    assert accepted.headers["HX-Redirect"] == "/admin/fleet?tenant=acme"
    mine = client.get("/admin/fleet?tenant=acme", headers=htmx(csrf))
    assert _tenants_column(mine.text) == {"h100-r2-n1": "acme", "h100-r2-n3": "acme"}

    over = client.post("/admin/fleet/assignments", headers=htmx(csrf),
                       data={"tenant": "acme", "node": ["h100-r1-n1", "h100-r1-n2"]})
    assert over.status_code == 409 and "approved quota of 24" in over.text
    assert "h100-r1-n1" not in _tenants_column(
        client.get("/admin/fleet?tenant=acme", headers=htmx(csrf)).text)  # all or nothing

    detail = client.get("/admin/nodes/h100-r2-n1", headers=HTML)
    assert "End assignment" in detail.text and "TenantLabelsApplied" in detail.text
    ended = client.post("/admin/nodes/h100-r2-n1/assignment/end", headers=htmx(csrf),
                        data={"confirm_name": "h100-r2-n1"})
    assert ended.headers["HX-Redirect"] == "/admin/nodes/h100-r2-n1"
    again = client.get("/admin/nodes/h100-r2-n1", headers=HTML)
    assert "Dedicate to tenant" in again.text and "admin@example.com" in again.text


def test_node_page_shows_refusals_inline(synced: Synced, client: TestClient,
                                         db: Session) -> None:
    _acme_with_h100_quota(db, gpus=0)
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/admin/nodes/h100-r1-n1", headers=HTML)
    refused = client.post("/admin/nodes/h100-r1-n1/assignment",
                          headers={**HTML, "X-CSRF-Token": csrf_of(page.text)},
                          data={"tenant": "acme"})
    assert refused.status_code == 409 and "approved quota of 0" in refused.text
    unknown = client.post("/admin/nodes/h100-r1-n1/assignment",
                          headers={**HTML, "X-CSRF-Token": csrf_of(page.text)},
                          data={"tenant": "initech"})
    assert unknown.status_code == 422 and "no tenant" in unknown.text
    bad = client.post("/admin/fleet/suggest", headers=htmx(csrf_of(page.text)),
                      data={"tenant": "acme", "gpu_class": H100, "gpus": "lots"})
    assert bad.status_code == 422 and 'data-field="gpus"' in bad.text


def test_tenants_see_their_dedicated_nodes_only(synced: Synced, client: TestClient,
                                                db: Session) -> None:
    _acme_with_h100_quota(db, gpus=8)
    admin = bearer(db, factories.user(db, admin=True))
    db.commit()
    assert client.put("/api/v1/nodes/h100-r1-n1/assignment", headers=admin,
                      json={"tenant": "acme"}).status_code == 200
    acme_viewer, globex_admin = factories.user(db), factories.user(db)
    acme = db.scalar(select(Tenant).where(Tenant.slug == "acme"))
    assert acme is not None
    factories.membership(db, acme, acme_viewer, "viewer")
    factories.membership(db, factories.tenant(db, "globex"), globex_admin, "admin")
    db.commit()
    viewer, rival = {**HTML, **bearer(db, acme_viewer)}, {**HTML, **bearer(db, globex_admin)}
    db.commit()
    own = client.get("/t/acme/nodes", headers=viewer)
    assert re.search(r'data-node="h100-r1-n1">.*?<td>8</td>.*?ready', own.text, re.S)
    assert "No dedicated nodes" in client.get("/t/globex/nodes", headers=rival).text
    assert client.get("/t/acme/nodes", headers=rival).status_code == 404


def test_the_node_table_pages_in_the_chosen_order_and_keeps_its_filters(
    synced: Synced, client: TestClient,
) -> None:
    oidc.sign_in(client, "admin@example.com")
    first = client.get("/admin/fleet?zone=eu-central-b&sort=rack&limit=3", headers=HTML)
    assert first.status_code == 200
    shown = list(_tenants_column(first.text))
    more = re.search(r'<a href="(/admin/fleet\?[^"]+)" hx-get="[^"]+"[^>]*>More nodes</a>',
                     first.text)
    assert more and "zone=eu-central-b" in more.group(1) and "sort=rack" in more.group(1)
    assert "First page" not in first.text
    rest = client.get(more.group(1).replace("&amp;", "&") + "&limit=3",
                      headers={"HX-Request": "true"})
    assert rest.text.lstrip().startswith('<div id="node-table"') and "First page" in rest.text
    shown += list(_tenants_column(rest.text))
    assert len(shown) == 4 and len(set(shown)) == 4  # the zone's four nodes, none twice


def test_the_dedicate_page_picks_a_tenant_and_says_a_refusal_once(
        synced: Synced, client: TestClient, db: Session) -> None:
    _acme_with_h100_quota(db, gpus=8)
    factories.tenant(db, "globex")
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/admin/fleet/suggest", headers=HTML)
    picker = re.search(r'<select name="tenant"[^>]*>(.*?)</select>', page.text, re.S)
    assert picker is not None  # a picker, not a slug to remember
    assert re.findall(r'<option value="([^"]+)"', picker.group(1)) == ["acme", "globex"]
    nope = client.post("/admin/fleet/suggest", headers=htmx(csrf_of(page.text)),
                       data={"tenant": "nope", "gpu_class": H100, "gpus": "8"})
    assert nope.status_code == 422
    assert nope.text.count("there is no tenant") == 1


def test_a_suggestion_beyond_the_quota_warns_and_disables_dedicating_still_refused_on_submit(
        synced: Synced, client: TestClient, db: Session) -> None:
    _acme_with_h100_quota(db, gpus=8)
    oidc.sign_in(client, "admin@example.com")
    csrf = csrf_of(client.get("/admin/fleet/suggest", headers=HTML).text)
    within = client.post("/admin/fleet/suggest", headers=htmx(csrf),
                         data={"tenant": "acme", "gpu_class": H100, "gpus": "8"})
    button = re.search(r'<button[^>]*id="dedicate-button"[^>]*>', within.text)
    assert button is not None and " disabled" not in button.group(0)
    beyond = client.post("/admin/fleet/suggest", headers=htmx(csrf),
                         data={"tenant": "acme", "gpu_class": H100, "gpus": "16"})
    assert beyond.status_code == 200
    warning = re.search(r'<p class="callout-warning" id="suggestion-note" role="alert">([^<]*)',
                        beyond.text)
    assert warning is not None and "approve more before assigning" in warning.group(1)
    button = re.search(r'<button[^>]*id="dedicate-button"[^>]*>', beyond.text)
    assert button is not None and " disabled" in button.group(0)
    assert ("The checked nodes hold 16 GPUs; acme has 8 GPUs of approved quota left for "
            "dedicated nodes") in beyond.text
    checked = re.findall(r'name="node" value="([^"]+)" checked', beyond.text)
    refused = client.post("/admin/fleet/assignments", headers=htmx(csrf),
                          data={"tenant": "acme", "node": checked})
    assert refused.status_code == 409 and "approved quota of 8" in refused.text
