"""Errors of the Kubernetes port, classified the way kopf classifies handler errors.

A reconciler only needs to know one thing about a failure: try again later (transient)
or stop and tell the tenant why (permanent). ``reason`` is a short CamelCase word shown
to tenants in a condition; ``message`` is the human-readable explanation.
"""

from __future__ import annotations


class KubeError(Exception):
    """Any failure of a call through the Kubernetes port."""

    def __init__(
        self, message: str = "", *, reason: str = "KubernetesError", status: int | None = None
    ) -> None:
        super().__init__(message or reason)
        self.message = message or reason
        self.reason = reason
        self.status = status


class TransientKubeError(KubeError):
    """Worth retrying later: throttling, server errors, conflicts on writes, network trouble.

    ``delay_seconds`` is the server's hint (Retry-After) or the adapter's last backoff;
    ``None`` lets the caller choose its own delay.
    """

    def __init__(
        self,
        message: str = "",
        *,
        delay_seconds: float | None = None,
        reason: str = "Transient",
        status: int | None = None,
    ) -> None:
        super().__init__(message, reason=reason, status=status)
        self.delay_seconds = delay_seconds


class PermanentKubeError(KubeError):
    """Retrying the same request cannot help: invalid, forbidden, missing parent, conflict."""

    def __init__(
        self, message: str = "", *, reason: str = "Permanent", status: int | None = None
    ) -> None:
        super().__init__(message, reason=reason, status=status)


class ApplyConflictError(PermanentKubeError):
    """Server-side apply found fields owned by another manager; re-apply with force to take them."""

    def __init__(self, message: str = "", *, status: int | None = 409) -> None:
        super().__init__(message, reason="Conflict", status=status)
