"""Live streams: a change reaches the browser as an event, another tenant's stream is a 404,
a closed stream frees its slot, and streams neither hold database connections while idle nor
count against the load shedder's requests in flight."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from app.web import live
from tests import factories
from tests.support.principals import bearer
from tests.support.serving import served_app
from tests.support.waiting import wait_for

STREAM = "/live/t/acme/clusters/train"


@dataclass
class Live:
    base: str
    app: FastAPI
    database: Database
    headers: dict[str, str]
    globex_headers: dict[str, str]


def _seed(db: Session) -> tuple[dict[str, str], dict[str, str]]:
    acme, globex = factories.tenant(db, "acme"), factories.tenant(db, "globex")
    alice, gary = factories.user(db), factories.user(db)
    factories.membership(db, acme, alice, "viewer")
    factories.membership(db, globex, gary, "admin")
    host = factories.host_cluster(db)
    factories.cluster(db, acme, host, "train")
    factories.cluster(db, globex, host, "train")
    headers = bearer(db, alice, "read"), bearer(db, gary, "read")
    db.commit()
    return headers


@pytest.fixture
def served(own_pg_database: Database, settings: Settings,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    monkeypatch.setattr(live, "TIMING", live.Timing(check_seconds=0.1, keepalive_seconds=0.5,
                                                    lifetime_seconds=30))
    with own_pg_database.session() as db:
        alice, gary = _seed(db)
    app = create_app(settings.model_copy(update={"web_max_in_flight": 1}), own_pg_database)
    with served_app(app) as base:
        yield Live(base, app, own_pg_database, alice, gary)


def _events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) pairs, and ("comment", text) for keep-alives."""
    event, data = "message", ""
    for line in lines:
        if line.startswith(":"):
            yield "comment", line[1:].strip()
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and data:
            yield event, data
            event, data = "message", ""


def _set_ready(database: Database, tenant_slug_cluster: str = "train") -> None:
    condition = {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                 "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "observedGeneration": 1}
    with database.transaction() as db:
        db.execute(update(VirtualCluster).where(VirtualCluster.name == tenant_slug_cluster)
                   .values(conditions=[condition], observed_generation=1))


def test_a_condition_change_reaches_the_stream(served: Live) -> None:
    with httpx.Client(base_url=served.base, timeout=10) as client, client.stream(
            "GET", STREAM, headers=served.headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response.iter_lines())
        assert next(events)[0] == "ready"
        assert next(events) == ("comment", "keep-alive")  # nothing changed yet
        _set_ready(served.database)
        kind, _data = next(e for e in events if e[0] != "comment")
        assert kind == "changed"


def test_another_tenants_stream_is_a_404(client: TestClient, db: Session) -> None:
    alice, _gary = _seed(db)
    assert client.get(STREAM, headers=alice).status_code == 200  # ends at once under tests
    for path in ("/live/t/globex/clusters/train", "/live/t/acme/clusters/nope",
                 "/live/admin/quota-requests", "/live/admin/fleet"):
        refused = client.get(path, headers=alice)
        assert refused.status_code in (403, 404), path
        assert "text/event-stream" not in refused.headers.get("content-type", ""), path
    assert client.get("/live/t/globex/clusters/train", headers=alice).status_code == 404


def test_an_idle_stream_holds_no_connection_nor_a_request_slot(served: Live) -> None:
    """The app sheds past one request in flight, yet answers while a stream is open."""
    pool = served.database.engine.pool
    with httpx.Client(base_url=served.base, timeout=10) as client, client.stream(
            "GET", STREAM, headers=served.headers) as response:
        events = _events(response.iter_lines())
        assert next(events)[0] == "ready"
        assert next(events)[0] == "comment"  # idle: between checks
        assert served.app.state.live_streams.open == 1
        assert pool.checkedout() == 0  # type: ignore[attr-defined]
        page = client.get("/t/acme", headers={**served.globex_headers, "accept": "text/html"})
        assert page.status_code == 404  # served, not shed with a 503: gary cannot see acme


def test_a_closed_stream_frees_its_slot(served: Live) -> None:
    client = httpx.Client(base_url=served.base, timeout=10)
    with client.stream("GET", STREAM, headers=served.headers) as response:
        # Held in a name: a dropped generator closes the response, and so the stream, at once.
        events = _events(response.iter_lines())
        assert next(events)[0] == "ready"
        assert served.app.state.live_streams.open == 1
    client.close()  # the browser leaves the page
    wait_for(lambda: served.app.state.live_streams.open == 0, "the stream to be freed",
             timeout=15)


def test_a_stream_ends_after_its_lifetime(served: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "TIMING", live.Timing(check_seconds=0.1, lifetime_seconds=0.5))
    with httpx.Client(base_url=served.base, timeout=10) as client, client.stream(
            "GET", STREAM, headers=served.headers) as response:
        kinds = [kind for kind, _data in _events(response.iter_lines())]
    assert kinds[0] == "ready" and kinds[-1] == "bye"
    assert served.app.state.live_streams.open == 0


def test_a_reconnect_hears_of_what_changed_while_away(served: Live) -> None:
    with httpx.Client(base_url=served.base, timeout=10) as client:
        with client.stream("GET", STREAM, headers=served.headers) as response:
            seen = next(line[4:] for line in response.iter_lines() if line.startswith("id: "))
        _set_ready(served.database)
        again = {**served.headers, "Last-Event-ID": seen}
        with client.stream("GET", STREAM, headers=again) as response:
            assert next(_events(response.iter_lines()))[0] == "changed"
