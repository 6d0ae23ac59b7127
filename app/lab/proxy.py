"""The lab's way in to the virtual clusters: an HTTP CONNECT proxy on loopback.

Tenants reach a virtual cluster at its endpoint (``https://<cluster>.<tenant>.vc.lab``), which
in production an ingress or load balancer serves under a DNS name. The lab has no DNS: kubectl
and the portal (``HTTPS_PROXY``, which both honour) ask this proxy, which sends the connection
to the pod serving that name. TLS goes end to end, untouched: the certificate is the virtual
cluster's own, for its endpoint name.
"""

from __future__ import annotations

import logging
import select
import socket
import socketserver
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

Routes = Callable[[], dict[str, str]]
BACKEND_PORT = 8443
MAX_HEADER_BYTES = 8192


class _Handler(socketserver.BaseRequestHandler):
    server: ConnectProxy

    def handle(self) -> None:
        client: socket.socket = self.request
        client.settimeout(10)
        head = _read_head(client)
        target = _connect_target(head)
        address = self.server.routes().get(target or "")
        if address is None:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        try:
            backend = socket.create_connection((address, BACKEND_PORT), timeout=5)
        except OSError:
            client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            return
        client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        client.settimeout(None)
        with backend:
            _splice(client, backend)


class ConnectProxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, routes: Routes, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.routes = routes

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ConnectProxy:
        threading.Thread(target=self.serve_forever, name="lab-proxy", daemon=True).start()
        return self


def _read_head(client: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head and len(head) < MAX_HEADER_BYTES:
        chunk = client.recv(1024)
        if not chunk:
            break
        head += chunk
    return head


def _connect_target(head: bytes) -> str | None:
    """The host name of ``CONNECT host:port HTTP/1.1``; None for anything else."""
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or parts[0] != b"CONNECT":
        return None
    host, _, _port = parts[1].decode("ascii", "replace").rpartition(":")
    return host.lower()


def _splice(one: socket.socket, other: socket.socket) -> None:
    sockets = [one, other]
    while True:
        readable, _, _ = select.select(sockets, [], [], 300)
        if not readable:
            return
        for source in readable:
            try:
                data = source.recv(65536)
                if data:
                    (other if source is one else one).sendall(data)
            except OSError:
                return
            if not data:
                return
