"""The fleet page's capacity chart agrees with its table; ending an assignment needs the node's
name typed out; the fleet and node pages are live regions."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.nodes.models import NodeAssignment
from tests.nodes.conftest import Synced
from tests.nodes.test_fleet_web import _acme_with_h100_quota
from tests.support import oidc
from tests.support.web import HTML, csrf_of, htmx

COLUMNS = {"dedicated": "dedicated", "shared-guaranteed": "shared-guaranteed", "free": "free",
           "total": "total", "guaranteed": "guaranteed"}


def chart_values(page: str, chart_id: str) -> dict[tuple[str, str], int]:
    svg = page[page.index(f'id="{chart_id}"'):]
    svg = svg[:svg.index("</svg>")]
    bars = re.findall(r'data-group="([^"]+)" data-series="([^"]+)" data-value="(-?\d+)"', svg)
    return {(group, series): int(value) for group, series, value in bars}


def table_values(page: str, table_id: str, columns: dict[str, str]) -> dict[tuple[str, str], int]:
    table = page[page.index(f'id="{table_id}"'):]
    table = table[:table.index("</table>")]
    values = {}
    for name, row in re.findall(r'<tr data-display-name="([^"]+)"(.*?)</tr>', table, re.S):
        for series, css in columns.items():
            cell = re.search(rf'class="{css}">(-?\d+)<', row)
            assert cell, (name, css)
            values[(name, series)] = int(cell.group(1))
    return values


def charted_from(table: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """What the chart stacks, from the table: each GPU once, ending at the total."""
    charted = {}
    for name in {name for name, _ in table}:
        row = {series: value for (group, series), value in table.items() if group == name}
        charted.update({(name, "dedicated"): row["dedicated"],
                        (name, "shared-guaranteed"): row["shared-guaranteed"],
                        (name, "free"): row["free"],
                        (name, "pool-not-ready"): row["total"] - row["guaranteed"] - row["free"]})
    return charted


def test_the_capacity_chart_shows_the_tables_numbers(synced: Synced, client: TestClient,
                                                     db: Session) -> None:
    _acme_with_h100_quota(db, gpus=24)
    oidc.sign_in(client, "admin@example.com")
    page = client.get("/admin/fleet", headers=HTML).text
    charted = chart_values(page, "capacity-chart")
    assert charted and charted == charted_from(table_values(page, "fleet-capacity", COLUMNS))
    title = "GPUs per GPU class: dedicated, guaranteed, free"
    assert f'<title id="capacity-chart-title">{title}</title>' in page
    assert f">{title}</text>" in page  # drawn, not only announced
    assert 'sse-connect="/live/admin/fleet"' in page
    # The live stream refreshes the capacity section alone.
    section = client.get("/admin/fleet", headers={**htmx(csrf_of(page)),
                                                  "HX-Target": "fleet-capacity-section"})
    assert section.text.lstrip().startswith('<section id="fleet-capacity-section"')
    assert chart_values(section.text, "capacity-chart") == charted


def test_ending_an_assignment_needs_the_nodes_name(synced: Synced, client: TestClient,
                                                   db: Session) -> None:
    _acme_with_h100_quota(db, gpus=24)
    oidc.sign_in(client, "admin@example.com")
    csrf = csrf_of(client.get("/admin/nodes/h100-r2-n1", headers=HTML).text)
    client.post("/admin/nodes/h100-r2-n1/assignment", headers=htmx(csrf), data={"tenant": "acme"})
    page = client.get("/admin/nodes/h100-r2-n1", headers=HTML).text
    assert 'sse-connect="/live/admin/nodes/h100-r2-n1"' in page
    assert "Type <strong>h100-r2-n1</strong> to confirm" in page
    for typed in ("", "h100-r2-n2", "H100-R2-N1"):
        refused = client.post("/admin/nodes/h100-r2-n1/assignment/end", headers=htmx(csrf),
                              data={"confirm_name": typed})
        assert refused.status_code == 422
        assert "type the name &#39;h100-r2-n1&#39; exactly to confirm" in refused.text
        assert 'aria-invalid="true"' in refused.text
    db.expire_all()
    active = db.scalars(select(NodeAssignment).where(NodeAssignment.ended_at.is_(None))).all()
    assert len(active) == 1  # nothing changed
    ended = client.post("/admin/nodes/h100-r2-n1/assignment/end", headers=htmx(csrf),
                        data={"confirm_name": "h100-r2-n1"})
    assert ended.headers["HX-Redirect"] == "/admin/nodes/h100-r2-n1"
    assert "shared pool" in ended.headers["HX-Trigger"]  # the toast for the next page
