"""Small HTTP servers a test runs in a thread on a free loopback port: a scrape target, a
stand-in Prometheus, a webhook receiver."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STOP_SECONDS = 10


@contextmanager
def served(handler: type[BaseHTTPRequestHandler],
           wrap: Callable[[socket.socket], socket.socket] | None = None) -> Iterator[int]:
    """``handler`` served on 127.0.0.1 (through ``wrap``, e.g. TLS) while the block runs; yields
    the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if wrap is not None:
        server.socket = wrap(server.socket)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=STOP_SECONDS)


@contextmanager
def metrics_page(page: Callable[[], bytes]) -> Iterator[str]:
    """A scrape target answering ``page()`` in Prometheus' text format; yields host:port."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with served(Page) as port:
        yield f"127.0.0.1:{port}"
