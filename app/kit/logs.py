"""Logging with the request id on every line."""

from __future__ import annotations

import logging
import re
import secrets
from contextvars import ContextVar

request_id_var: ContextVar[str] = ContextVar("request_id", default="-")


def new_request_id() -> str:
    return secrets.token_hex(8)


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


_SECRET_QUERY = re.compile(r"\b(code|state|token|access_token|id_token)=[^&\s]*")


def redact_query(text: str) -> str:
    return _SECRET_QUERY.sub(r"\1=[redacted]", text)


class AccessLogRedactor(logging.Filter):
    """The sign-in callback carries a one-time code and state in its query: keep them out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_query(a) if isinstance(a, str) else a for a in record.args)
        return True


HANDLER_NAME = "portal"


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.set_name(HANDLER_NAME)
    handler.addFilter(RequestIdFilter())
    handler.addFilter(AccessLogRedactor())
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
