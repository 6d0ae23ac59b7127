"""A lab for the lab's tests: starting one takes minutes, so its modules come in two groups
of a lab each (``groups.py``), which a parallel run gives to two workers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.lab import demo, walk
from app.lab.main import Lab, LabOptions
from tests.lab import groups
from tests.support import slots
from tests.support.kube_server import skip_unless_ci, tools_bin
from tests.support.web import free_port


@pytest.fixture(scope="package")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    programs = tools_bin()
    if os.geteuid() != 0 or programs is None:
        skip_unless_ci("the lab needs root (network namespaces) and `make tools`")
    with slots.claimed("lab-network") as slot:
        options = LabOptions(
            folder=tmp_path_factory.mktemp("lab") / ".lab", programs=programs,
            charts=Path(os.environ.get("PORTAL_CHARTS", ".cache/charts")),
            kai_crds=Path(os.environ.get("PORTAL_KAI_CRDS", ".cache/kai-crds")),
            metal3_crds=Path(os.environ.get("PORTAL_METAL3_CRDS", ".cache/metal3-crds")),
            port=free_port(), idp_port=free_port(), metrics_port=free_port(),
            worker_metrics_port=free_port(), dcgm_port=free_port(),
            prometheus_port=free_port(), network=groups.lab_network(slot))
        with Lab(options).running() as running:
            yield running


@pytest.fixture(scope="package")
def walked(lab: Lab) -> walk.Report:
    """The three-teams walk, once for every module that reads or attacks what it made."""
    return demo.run(demo.read_env(lab.folder / "env"), lab.folder / "kubeconfigs")
