"""A real HTTPS webhook receiver on 127.0.0.1, as a team would run one.

It checks each request's Standard Webhooks signature with its own code (written from the
spec, not importing the portal's ``signing.py``: a mistake shared by sender and receiver
would otherwise pass), records what came, and can be told to fail: the next N requests
answer a status, every request answers a status, or requests are held until released.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from app.webhook.certificates import issue
from tests.support.waiting import HANG_SECONDS

HOST = "127.0.0.1"
TOLERANCE_SECONDS = 300


@dataclass(frozen=True)
class Received:
    id: str
    headers: dict[str, str]
    body: bytes
    at: float
    # None: the signature checked out; else why not (the request was answered 401).
    refused: str | None
    status: int


def signature_problem(secrets: Sequence[str], headers: Mapping[str, str], body: bytes,
                      now: float) -> str | None:
    """Standard Webhooks 1.0, symmetric: why this request is not signed by one of ``secrets``
    (None: it is)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    try:
        msg_id = lowered["webhook-id"]
        timestamp = lowered["webhook-timestamp"]
        signatures = lowered["webhook-signature"]
    except KeyError as missing:
        return f"missing header {missing}"
    if not timestamp.isdigit() or abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        return "timestamp outside the tolerance"
    content = b"%s.%s.%s" % (msg_id.encode(), timestamp.encode(), body)
    for secret in secrets:
        key = base64.b64decode(secret.split("_", 1)[1])
        mine = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
        for offered in signatures.split():
            version, _, value = offered.partition(",")
            if version == "v1" and hmac.compare_digest(value.encode(), mine.encode()):
                return None
    return "no signature matches"


@dataclass
class Receiver:
    port: int
    ca_pem: str
    secrets: list[str]
    received: list[Received] = field(default_factory=list)
    # The next len() requests answer these statuses, in order.
    failures: list[int] = field(default_factory=list)
    # Every request (after the failures) answers this.
    status: int = 200
    released: threading.Event = field(default_factory=threading.Event)
    # Requests being held (read, not yet answered).
    waiting: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.released.set()

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}/hooks/portal"

    def trusting(self) -> ssl.SSLContext:
        """A client context trusting this receiver's certificate only."""
        return ssl.create_default_context(cadata=self.ca_pem)

    def fail_next(self, count: int, status: int = 500) -> None:
        with self._lock:
            self.failures.extend([status] * count)

    def hold(self) -> None:
        """Requests wait (up to HANG_SECONDS) until :meth:`release`."""
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def accepted(self) -> list[Received]:
        return [r for r in self.received if r.refused is None and 200 <= r.status <= 299]

    def _answer_for(self, refused: str | None) -> int:
        with self._lock:
            if refused is not None:
                return 401
            if self.failures:
                return self.failures.pop(0)
            return self.status

    def _record(self, entry: Received) -> None:
        with self._lock:
            self.received.append(entry)


class _Handler(BaseHTTPRequestHandler):
    receiver: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        with self.receiver._lock:
            self.receiver.waiting += 1
        self.receiver.released.wait(HANG_SECONDS)
        with self.receiver._lock:
            self.receiver.waiting -= 1
        refused = signature_problem(self.receiver.secrets, headers, body, time.time())
        status = self.receiver._answer_for(refused)
        self.receiver._record(Received(headers.get("webhook-id", ""), headers, body,
                                       time.time(), refused, status))
        answer = (refused or "ok").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: Any) -> None:
        pass


@contextmanager
def webhook_receiver(tmp_path: Path, secrets: Sequence[str]) -> Iterator[Receiver]:
    """A receiver knowing ``secrets`` (any one of them verifies), served until the block ends."""
    certificate = issue([HOST], datetime.now(UTC), timedelta(hours=1))
    folder = tmp_path / "webhook-receiver"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cert.pem").write_text(certificate.cert_pem)
    (folder / "key.pem").write_text(certificate.key_pem)
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    receiver = Receiver(0, certificate.cert_pem, list(secrets))
    handler = type("Handler", (_Handler,), {"receiver": receiver})
    server = ThreadingHTTPServer((HOST, 0), handler)
    server.daemon_threads = True
    server.socket = serving.wrap_socket(server.socket, server_side=True)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release()
        server.shutdown()
        server.server_close()
        thread.join(5)
