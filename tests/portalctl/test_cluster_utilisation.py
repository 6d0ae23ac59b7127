"""`portalctl clusters show` prints the cluster's GPU utilisation, or "unknown" with the reason
when the portal cannot read it (never 0%)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.database.core import Database
from app.kit.config import Settings
from tests.portalctl.conftest import Portal, PortalCtl, _serve
from tests.support.fake_prometheus import fake_prometheus
from tests.utilisation.support import answers


@pytest.fixture
def portal_with_prometheus(settings: Settings, own_pg_database: Database) -> Iterator[Portal]:
    with fake_prometheus(answers()) as url:
        yield from _serve(settings.model_copy(update={
            "prometheus_url": url, "prometheus_timeout_seconds": 30.0}), own_pg_database,
                          ready_cluster_name="train")


def _utilisation_line(stdout: str) -> str:
    [line] = [line for line in stdout.splitlines() if line.startswith("utilisation")]
    return line


def test_show_prints_the_clusters_utilisation_and_idle_gpus(
        portal_with_prometheus: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal_with_prometheus, "acme-viewer")
    shown = portalctl("clusters", "show", "train")
    assert shown.exit_code == 0, shown.stderr
    assert "40% (mean of 2 GPUs bound), 1 idle past 30 minutes" in _utilisation_line(shown.stdout)
    as_json = portalctl("clusters", "show", "train", "-o", "json").stdout
    assert '"gpus_idle": 1' in as_json


def test_show_says_unknown_without_prometheus(
        portal_with_ready_cluster: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal_with_ready_cluster, "acme-viewer")
    shown = portalctl("clusters", "show", "train")
    assert shown.exit_code == 0, shown.stderr
    line = _utilisation_line(shown.stdout)
    assert "unknown (PORTAL_PROMETHEUS_URL is not set)" in line and "%" not in line
