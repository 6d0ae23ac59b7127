"""How one reconcile of a cluster went, and on what host: shared by its step modules."""

from __future__ import annotations

from dataclasses import dataclass

from app.kube.errors import KubeError, TransientKubeError
from app.kube.helm import Installer, InstallError
from app.kube.port import KubePort

ACTOR = "cluster-reconciler"
NO_HOST_MESSAGE = (
    "No host cluster is configured (set PORTAL_KUBECONFIG, or run the portal in the host "
    "cluster). The cluster page shows the objects and vcluster.yaml the worker will apply."
)


@dataclass(frozen=True)
class Failure:
    message: str
    permanent: bool = False
    # The server's Retry-After, when it gave one.
    delay: float | None = None
    # Nothing answered at the host's address: its breaker opens.
    unreachable: bool = False


@dataclass(frozen=True)
class Pass:
    """How a reconcile went: when to look again (None: at the resync period), or why not."""

    next_in: float | None = None
    converged: bool = False
    failure: Failure | None = None
    deleted: bool = False
    # The host answered during the run.
    reached: bool = True


@dataclass(frozen=True)
class Host:
    """The host cluster one reconcile works on: its client and its helm."""

    id: int
    name: str
    port: KubePort | None
    installer: Installer
    # Its API server can reach the admission webhook (app/hosts/webhook_route.py).
    webhook: bool = True


def classify(error: Exception) -> tuple[str, str, bool, float | None]:
    """(reason, message, permanent, server's delay) of a step's failure."""
    if isinstance(error, TransientKubeError):
        return error.reason, error.message, False, error.delay_seconds
    if isinstance(error, KubeError):
        return error.reason, error.message, True, None
    if isinstance(error, InstallError):
        return error.reason, error.message, error.permanent, None
    return "InvalidSpec", str(error), True, None

