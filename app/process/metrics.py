"""Where `portal serve` and `portal worker` serve their metrics without a token
(``PORTAL_METRICS_ADDRESS``, ``PORTAL_WORKER_METRICS_ADDRESS``), and the folder through which
`portal serve --workers N`'s processes merge theirs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry

from app.kit.config import listen_address
from app.kit.metrics import fresh_multiprocess_dir, remove_multiprocess_dir, serve_metrics

log = logging.getLogger("portal")


@contextmanager
def multiprocess_metrics(processes: int) -> Iterator[None]:
    """For a master about to start ``processes`` serving processes: a fresh folder named in
    the environment they inherit (any of them, and the master's own address, answers for all),
    removed when they are done. One process keeps its metrics in memory."""
    if processes == 1:
        yield
        return
    folder = fresh_multiprocess_dir()
    try:
        yield
    finally:
        remove_multiprocess_dir(folder)


@contextmanager
def metrics_address(address: str | None, *registries: CollectorRegistry,
                    default: bool = True) -> Iterator[None]:
    """Serves ``registries`` (and, with ``default``, the process's own metrics) on ``address``
    while the block runs; unset: nothing. An address another process holds costs the metrics,
    not the process (a warning)."""
    if not address:
        yield
        return
    host, port = listen_address(address)
    try:
        server = serve_metrics(host, port, *registries, default=default)
    except OSError as error:
        log.warning("metrics not served on %s: %s", address, error.strerror or error)
        yield
        return
    log.info("metrics served on http://%s/metrics", address)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
