"""The portal served by uvicorn on a free loopback port, for tests that drive it over real HTTP
(headless Chromium, the installed portalctl script)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from app.database.core import Database
from app.kit.config import Settings
from app.kube.connector import KubeConnector
from app.kube.helm import Installer
from app.process.asgi import create_app
from app.process.worker import build_worker


@contextmanager
def serving(settings: Settings, database: Database, kube: KubeConnector | None = None,
            *, with_worker: bool = False, installer: Installer | None = None) -> Iterator[str]:
    """The portal on a free loopback port (and its worker, when asked); yields the base URL."""
    with served_app(create_app(settings, database, kube)) as base:
        if not with_worker:
            yield base
            return
        worker = build_worker(settings, database, kube, installer)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            yield base
        finally:
            worker.stop()
            thread.join(10)


@contextmanager
def served_app(app: ASGIApp, *, started_within: float = 60.0) -> Iterator[str]:
    """``app`` served by uvicorn in a thread, on a loopback socket bound here, so that no
    other process can take its port between the choice and the bind; yields the base URL once
    the server accepts."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    # Bounded, as `portal serve`'s: a browser's open stream must not keep it serving on.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        _wait_until_started(server, thread, started_within)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()


def _wait_until_started(server: uvicorn.Server, thread: threading.Thread, within: float) -> None:
    deadline = time.monotonic() + within
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the portal's server stopped before it started: see its log")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the portal's server did not start in {within:.0f} s")
        time.sleep(0.05)
