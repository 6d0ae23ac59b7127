"""The vCluster chart as a Helm repository on loopback, for the real helm.

``make tools`` packages the chart of the vCluster module the vcluster binary is built from (the
module download, never a copy in the repository) into ``PORTAL_CHARTS`` with an index.yaml;
this serves that folder over HTTP, so that helm installs it with ``--repo``/``--version`` exactly
as it installs a published release.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.kube_server import skip_unless_ci


def charts_dir(chart: str, version: str) -> Path:
    """``PORTAL_CHARTS``, when it holds ``chart`` at ``version`` and its index."""
    folder = Path(os.environ.get("PORTAL_CHARTS", ""))
    if not (folder / "index.yaml").is_file() or not (folder / f"{chart}-{version}.tgz").is_file():
        skip_unless_ci(f"the {chart} {version} chart is not in PORTAL_CHARTS: `make tools` "
                       "packages it into .cache/charts, then `export PORTAL_CHARTS=$PWD/"
                       ".cache/charts` (`make pytest` does both)")
    return folder


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """helm's downloads are not the test's output."""


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """The folder as ``http://127.0.0.1:PORT`` until the block ends."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
