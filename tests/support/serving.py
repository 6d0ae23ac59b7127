"""The portal served by uvicorn on a free loopback port, for tests that drive it over real HTTP
(headless Chromium, the installed portalctl script)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn

from app.database.core import Database
from app.kit.config import Settings
from app.kube.connector import KubeConnector
from app.kube.helm import Installer
from app.process.asgi import create_app
from app.process.worker import build_worker
from tests.support.web import free_port


@contextmanager
def serving(settings: Settings, database: Database, kube: KubeConnector | None = None,
            *, with_worker: bool = False, installer: Installer | None = None) -> Iterator[str]:
    """The portal on a free loopback port (and its worker, when asked); yields the base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, database, kube),
                                           host="127.0.0.1", port=port, log_level="warning"))
    threads = [threading.Thread(target=server.run, daemon=True)]
    worker = build_worker(settings, database, kube, installer) if with_worker else None
    if worker is not None:
        threads.append(threading.Thread(target=worker.run, daemon=True))
    for thread in threads:
        thread.start()
    base = f"http://127.0.0.1:{port}"
    _wait_until_up(base)
    try:
        yield base
    finally:
        server.should_exit = True
        if worker is not None:
            worker.stop()
        for thread in threads:
            thread.join(10)


def _wait_until_up(base: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/healthz")
            return
        except httpx.TransportError:
            time.sleep(0.1)
