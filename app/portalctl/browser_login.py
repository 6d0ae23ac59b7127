"""`portalctl login` through the browser: a one-shot listener on 127.0.0.1 that the portal's
``/cli/login`` page hands a new API token to (see app/auth/cli_login.py for the other side).

The listener takes one answer on ``POST /callback``, only with this login's random state, and
gives up after a timeout. Anything else sent to it (another path, a GET for a favicon, a body
that is not a form) is refused and does not count.
"""

from __future__ import annotations

import hmac
import os
import secrets
import socket
import sys
import time
import webbrowser
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlencode

CALLBACK_PATH = "/callback"
MAX_BODY = 16 * 1024
DONE_PAGE = ("<!doctype html><meta charset='utf-8'><title>portalctl</title>"
             "<p id='portalctl-done'>{message}</p>")


class LoginFailed(Exception):
    pass


@dataclass
class Answer:
    token: str | None = None
    error: str | None = None


class _Server(HTTPServer):
    state: str
    answer: Answer | None = None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        if self.path != CALLBACK_PATH:
            self._reply(404, "Not found.")
            return
        length = self.headers.get("Content-Length", "")
        if not length.isascii() or not length.isdigit() or int(length) > MAX_BODY:
            self._reply(400, "Not an answer from the portal.")
            return
        body = self.rfile.read(int(length)).decode(errors="replace")
        fields = {key: values[0] for key, values in parse_qs(body).items()}
        self.server.answer = _answer_from(fields, self.server.state)
        if self.server.answer.token:
            self._reply(200, "portalctl is signed in. You can close this tab.")
        else:
            self._reply(400, f"portalctl is not signed in: {self.server.answer.error}.")

    def do_GET(self) -> None:
        self._reply(404, "Not found.")

    def _reply(self, status: int, message: str) -> None:
        body = DONE_PAGE.format(message=message).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the terminal shows only the outcome."""


def _answer_from(fields: dict[str, str], state: str) -> Answer:
    if not hmac.compare_digest(fields.get("state", "").encode(), state.encode()):
        return Answer(error="the answer did not carry this login's state, so it was refused")
    if fields.get("error") == "cancelled":
        return Answer(error="the sign-in was cancelled in the browser")
    token = fields.get("token", "")
    if not token:
        return Answer(error="the portal sent no token")
    return Answer(token=token)


class Listener:
    """Listens on 127.0.0.1 on a port the system picks, until one answer or the deadline."""

    def __init__(self) -> None:
        self.state = secrets.token_urlsafe(32)
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.state = self.state

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def wait(self, timeout: float) -> str:
        """The token; LoginFailed when refused, cancelled or out of time."""
        deadline = time.monotonic() + timeout
        while self.server.answer is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LoginFailed(f"no answer from the browser within {timeout:g}s; run "
                                  "portalctl login again (or use --token-stdin)")
            self.server.timeout = remaining
            self.server.handle_request()
        if self.server.answer.token is None:
            raise LoginFailed(self.server.answer.error or "no token")
        return self.server.answer.token

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.server.server_close()


def login_url(portal: str, port: int, state: str, name: str, days: int) -> str:
    query = urlencode({"port": port, "state": state, "name": name, "expires_in_days": days})
    return f"{portal.rstrip('/')}/cli/login?{query}"


def default_token_name() -> str:
    return f"portalctl on {socket.gethostname()}"[:100]


def can_open_browser() -> bool:
    """A console browser would take over the terminal the listener is waiting in: on Linux
    without a display, print the link instead (unless $BROWSER says what to run)."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def open_browser(url: str) -> bool:
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False
