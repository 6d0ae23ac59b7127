"""A folder of packaged charts (``make tools``: ``.cache/charts``) as a Helm repository on
loopback, so that helm installs the vCluster chart with ``--repo``/``--version`` exactly as it
installs a published release."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """helm's downloads are nobody's output."""


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
