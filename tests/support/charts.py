"""The vCluster chart as a Helm repository on loopback, for the real helm.

``make tools`` packages the chart of the vCluster module the vcluster binary is built from (the
module download, never a copy in the repository) into ``PORTAL_CHARTS`` with an index.yaml;
this serves that folder over HTTP, so that helm installs it with ``--repo``/``--version`` exactly
as it installs a published release.
"""

from __future__ import annotations

import os
from pathlib import Path

from app.lab.charts import served as served
from tests.support.kube_server import skip_unless_ci


def charts_dir(chart: str, version: str) -> Path:
    """``PORTAL_CHARTS``, when it holds ``chart`` at ``version`` and its index."""
    folder = Path(os.environ.get("PORTAL_CHARTS", ""))
    if not (folder / "index.yaml").is_file() or not (folder / f"{chart}-{version}.tgz").is_file():
        skip_unless_ci(f"the {chart} {version} chart is not in PORTAL_CHARTS: `make tools` "
                       "packages it into .cache/charts, then `export PORTAL_CHARTS=$PWD/"
                       ".cache/charts` (`make pytest` does both)")
    return folder
