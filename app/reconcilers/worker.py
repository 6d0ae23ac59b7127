"""The worker loop: asks each reconciler for due work until told to stop.

Reconcilers are level-triggered: each pass reads desired state from the database and actual
state from Kubernetes. Several workers may run; leases keep one object with one worker.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger(__name__)


class Reconciler(Protocol):
    name: str

    def run_due(self, worker_id: str) -> int:
        """Reconciles what is due now; returns how many objects it handled."""
        ...


def worker_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{threading.get_ident() % 100000}"


class Worker:
    def __init__(self, reconcilers: Sequence[Reconciler], poll_seconds: float) -> None:
        self.reconcilers = list(reconcilers)
        self.poll_seconds = poll_seconds
        self.identity = worker_identity()
        self.stopping = threading.Event()
        self.passes = 0

    def run(self) -> None:
        log.info("worker %s started with %s", self.identity,
                 [r.name for r in self.reconcilers] or "no reconcilers")
        while not self.stopping.is_set():
            handled = self.run_once()
            self.passes += 1
            if handled == 0:
                self.stopping.wait(self.poll_seconds)
        log.info("worker %s stopped after %d passes", self.identity, self.passes)

    def run_once(self) -> int:
        handled = 0
        for reconciler in self.reconcilers:
            if self.stopping.is_set():
                break
            try:
                handled += reconciler.run_due(self.identity)
            except Exception:
                # One failing reconciler must not stop the others; the next pass retries.
                log.exception("reconciler %s failed", reconciler.name)
        return handled

    def stop(self) -> None:
        self.stopping.set()
