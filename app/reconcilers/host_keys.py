"""What the kinds keyed by host cluster share: their keys, the host a key names and its
client, the host's breaker, and how a failed call to the host is reported to the runtime.

A key is a host cluster's id. ``host_keys`` lists the registered hosts the worker can reach
(the environment's host, and every host with stored credentials); ``host_target`` answers None
for a key whose host is gone or no longer reachable, so that its kind forgets the key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from app.database.core import Database
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from app.kit.config import Settings
from app.kit.crypto import UnreadableSecret
from app.kube.connector import HostTarget, KubeConnector, for_host
from app.kube.errors import KubeError, PermanentKubeError, TransientKubeError
from app.kube.port import KubePort
from app.reconcilers.kind import Context, Deferred, HostUnreachable, RetryLater, TerminalError

log = logging.getLogger(__name__)
# What a client says when nothing answers at the host's address.
UNREACHABLE_REASONS = ("ConnectionError",)
# How soon a key whose host has its share of the worker busy is looked at again.
HOST_BUSY_SECONDS = 1.0
# The longest a server's Retry-After is taken at its word.
MAX_RETRY_SECONDS = 300.0


class HostWriter:
    """What a kind that keeps objects on hosts is made with; it looks at each of its keys
    again at the worker's resync period."""

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube

    @property
    def resync_seconds(self) -> float:
        return float(self.settings.worker_resync_seconds)


def host_keys(db: Session, settings: Settings) -> list[str]:
    """The ids of every registered host the worker can reach (the default host made if
    missing), as keys."""
    return [str(target.host_id) for target in hosts_service.targets(db, settings)]


def host_target(database: Database, settings: Settings, key: str) -> HostTarget | None:
    """The host ``key`` names as the connector reaches it; None when it is gone or the worker
    cannot reach it any more (no credentials, not the environment's host)."""
    with database.session() as db:
        row = hosts_repository.host_by_id(db, int(key))
        if row is None:
            return None
        try:
            return hosts_service.target_for(row, settings)
        except UnreadableSecret as error:
            raise TerminalError(f"host cluster {row.name}: {error}") from error


def wait_for_breaker(context: Context, host_id: int) -> None:
    """While the host's breaker is open, no call goes to it: the key waits until it closes."""
    until = context.hosts.open_until(host_id)
    if until is not None:
        wait = max((until - context.hosts.clock()).total_seconds(), 1.0)
        raise RetryLater(f"host cluster {host_id} is unreachable; waiting for it", delay=wait)


@contextmanager
def host_share(context: Context, host_id: int) -> Iterator[None]:
    """A slot of the host's share of the worker's threads for the block: a host that answers
    slowly holds up only its own keys. With its share busy, the key is looked at again soon."""
    with context.slots.hold(host_id) as slot:
        if not slot:
            raise Deferred(f"host cluster {host_id} has its share of the worker busy",
                           delay=HOST_BUSY_SECONDS)
        yield


def client(kube: KubeConnector, target: HostTarget) -> KubePort | None:
    """The host's client (None: this connector has none for it). Credentials the client
    cannot use wait for an operator: the key is looked at again at its resync."""
    try:
        return for_host(kube, target)
    except Exception as error:  # the loader raises many kinds, all meaning "unusable"
        log.error("host cluster %s: no client from its credentials (%s)", target.name,
                  type(error).__name__)
        raise TerminalError(f"host cluster {target.name}: no client from its credentials "
                            f"({type(error).__name__})") from error


def unreachable(error: KubeError) -> bool:
    return isinstance(error, TransientKubeError) and error.reason in UNREACHABLE_REASONS


def failure(target: HostTarget, error: KubeError, what: str) -> Exception:
    """``error`` of a call to the host as the runtime takes it: the host's breaker when nothing
    answers, the resync for a refusal no retry changes, else a retry (never sooner than the
    server's Retry-After)."""
    message = f"{what} of host cluster {target.name} failed ({error.reason}: {error.message})"
    if unreachable(error):
        return HostUnreachable(target.host_id, message)
    if isinstance(error, PermanentKubeError):
        return TerminalError(message)
    return RetryLater(message, delay=server_delay(error))


def server_delay(error: KubeError) -> float | None:
    """The server's Retry-After, capped."""
    if isinstance(error, TransientKubeError) and error.delay_seconds is not None:
        return min(error.delay_seconds, MAX_RETRY_SECONDS)
    return None
