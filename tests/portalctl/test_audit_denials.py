"""`portalctl audit` reads a row that counts repeated denials (issue 30, item 5)."""

from __future__ import annotations

import httpx
import pytest

from app.database import core
from tests.portalctl.conftest import Portal, PortalCtl


def test_a_counted_row_says_how_many_and_until_when(
    portal: Portal, portalctl: PortalCtl, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = {"Authorization": "Bearer gtp_not-a-token-at-all"}
    for _ in range(5):
        assert httpx.get(f"{portal.url}/api/v1/me", headers=bad).status_code == 401
    moved = core.monotonic() + 61
    monkeypatch.setattr(core, "monotonic", lambda: moved)
    httpx.get(f"{portal.url}/api/v1/me", headers=bad)  # the next window writes the last one's
    portalctl.login(portal, "platform-admin")
    table = portalctl("audit", "--action", "authz.").stdout.splitlines()
    counted = [line for line in table if "times until" in line]
    assert len(counted) == 1
    assert "anonymous (127.0.0.1)" in counted[0]
    assert "route GET /api/v1/me (4 times until " in counted[0]
