"""Against a real Prometheus (``support/prometheus.py``) scraping a stand-in DCGM exporter's
page: the portal's queries, PromQL and all, give a cluster its GPUs and their mean, its day's
chart, and call no GPU idle that was bound only moments ago."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.kit.config import Settings
from app.utilisation import service
from tests.support.http_servers import metrics_page
from tests.support.prometheus import ScrapeJob, running_prometheus
from tests.support.tenancy import Tenancy, build_tenancy
from tests.utilisation.support import BUSY, DEDICATED, IDLE, RIVAL, build_fleet

SERIES: list[tuple[Mapping[str, str], float]] = [(BUSY, 80.0), (IDLE, 1.0), (DEDICATED, 0.0),
                                                  (RIVAL, 3.0)]


def exposition() -> bytes:
    """The exporter's page as Prometheus' text format, with its metric names and labels."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for labels, value in SERIES:
        named = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{named}}} {value}")
    lines.append("# TYPE DCGM_FI_DEV_FB_USED gauge")
    lines += [f'DCGM_FI_DEV_FB_USED{{UUID="{labels["UUID"]}",Hostname="{labels["Hostname"]}"}} 100'
              for labels, _ in SERIES]
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def tenancy(db: Session) -> Tenancy:
    tenancy = build_tenancy(db, nodes=0)
    build_fleet(db, tenancy)
    return tenancy


def test_a_real_prometheus_gives_the_cluster_its_gpus_and_none_idle_yet(
        tmp_path: Path, settings: Settings, db: Session, tenancy: Tenancy) -> None:
    with metrics_page(exposition) as target, \
            running_prometheus(tmp_path, [ScrapeJob("dcgm", [target])]) as prometheus:
        prometheus.wait_for_scrape("dcgm")
        prometheus.wait_for_value('DCGM_FI_DEV_GPU_UTIL{UUID="GPU-2"}', 1.0)
        reading = settings.model_copy(update={"prometheus_url": prometheus.url,
                                              "prometheus_timeout_seconds": 30.0})
        shown = service.cluster_utilisation(db, tenancy.principal(tenancy.acme_viewer), reading,
                                            "acme", "train", history=True)
    assert shown.known, shown.reason
    assert (shown.gpus_bound, shown.utilisation_percent, shown.framebuffer_used_mib) == (
        2, 40.5, 200.0)
    # GPU-2 sits at 1%, but its series began seconds ago: not idle past a 30-minute window.
    assert shown.gpus_idle == 0
    assert shown.history and shown.history[-1].utilisation_percent == 40.5
