"""The approval queue as a live page: a stream to follow, filters and pages swapped without a
reload (state in the URL), a toast for each decision, an empty state that says what next."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests import factories
from tests.support import oidc
from tests.support.web import HTML, csrf_of, htmx


def test_the_queue_is_live_filterable_and_toasts_decisions(client: TestClient,
                                                           db: Session) -> None:
    acme, gpu = factories.tenant(db, "acme"), factories.gpu_class(db, display_name="H100 80GB")
    first = factories.quota_request(db, acme, gpu, gpus=4)
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/admin/quota-requests", headers=HTML).text
    assert 'sse-connect="/live/admin/quota-requests"' in page
    assert 'hx-trigger="sse:changed, livepoll"' in page
    assert 'hx-push-url="true"' in page  # the filter's state lands in the URL
    csrf = csrf_of(page)

    decided = client.post(f"/admin/quota-requests/{first.id}/reject", headers=htmx(csrf),
                          data={"note": "not now"})
    toast = json.loads(decided.headers["HX-Trigger"])["toast"]["message"]
    assert toast == f"H100 80GB quota request #{first.id} (acme) rejected."

    pending = client.get("/admin/quota-requests?state=pending", headers=htmx(csrf)).text
    assert pending.lstrip().startswith('<div id="queue-table"')  # the table alone
    assert "Nothing waits for a decision" in pending and "See all requests" in pending
    everything = client.get("/admin/quota-requests?state=all", headers=htmx(csrf)).text
    assert f'id="queue-{first.id}"' in everything
