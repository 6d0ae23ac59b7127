"""Errors the services raise, shown as ``application/problem+json`` (RFC 9457) on the API."""

from __future__ import annotations

from typing import Any

PROBLEM_JSON = "application/problem+json"


class ProblemError(Exception):
    status: int = 400
    title: str = "Bad request"

    def __init__(self, detail: str = "", *, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.errors = errors or []

    @classmethod
    def with_status(cls, status: int, title: str, detail: str = "") -> ProblemError:
        error = cls(detail or title)
        error.status = status
        error.title = title
        return error

    def to_problem(self, instance: str, request_id: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": f"https://gpu-tenant-portal.dev/problems/{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
            "request_id": request_id,
        }
        if self.errors:
            body["errors"] = self.errors
        return body

    @property
    def slug(self) -> str:
        return self.title.lower().replace(" ", "-")


class NotFound(ProblemError):
    status = 404
    title = "Not found"


class Unauthenticated(ProblemError):
    status = 401
    title = "Authentication required"


class Forbidden(ProblemError):
    status = 403
    title = "Forbidden"


class Conflict(ProblemError):
    status = 409
    title = "Conflict"


class ValidationFailed(ProblemError):
    status = 422
    title = "Validation failed"

    @classmethod
    def on_field(cls, field: str, message: str) -> ValidationFailed:
        return cls(message, errors=[{"field": field, "message": message}])


class ServiceUnavailable(ProblemError):
    status = 503
    title = "Service unavailable"


class TooManyRequests(ProblemError):
    status = 429
    title = "Too many requests"

    def __init__(self, detail: str = "", *, retry_after: int = 1) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
