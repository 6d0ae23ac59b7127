"""Logging with the request id on every line."""

from __future__ import annotations

import logging
import re
import secrets
import time
from contextvars import ContextVar
from typing import Any
from urllib.parse import quote

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
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
ACCESS_LOGGER = "uvicorn.access"  # the name operators already filter on


class AccessLog:
    """A line per answer with the fields of uvicorn's access log: time, level, logger, request
    id, client address and port, method, path with its query (secrets redacted), HTTP version
    and status, in the portal's log format.

    Why not uvicorn's access log: through ``logging`` a line costs about 15 µs (a LogRecord,
    the caller's frame, thread and process names, two filters, the Formatter), a tenth of a
    health probe. When the portal's own handler is the one that would write it, the line is
    formatted here (the time's text made once a second) and written to that handler's stream
    under its lock; otherwise (tests, the logger reconfigured) it goes through ``logging``."""

    def __init__(self) -> None:
        self.logger = logging.getLogger(ACCESS_LOGGER)
        self._second = -1
        self._stamp = ""

    def write(self, scope: Any, status: int, request_id: str) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        message = access_message(scope, status)
        handler = self._portal_handler()
        if handler is None:
            self.logger.info("%s", message)
            return
        now = time.time()
        line = f"{self._time(now)},{int(now * 1000) % 1000:03d} INFO {ACCESS_LOGGER} " \
               f"[{request_id}] {message}\n"
        with handler.lock or _NO_LOCK:
            handler.stream.write(line)
            handler.stream.flush()

    def _portal_handler(self) -> logging.StreamHandler[Any] | None:
        if self.logger.handlers or not self.logger.propagate or self.logger.filters:
            return None
        for handler in logging.getLogger().handlers:
            if handler.name == HANDLER_NAME and isinstance(handler, logging.StreamHandler):
                return handler if handler.level <= logging.INFO else None
        return None

    def _time(self, now: float) -> str:
        second = int(now)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%d %H:%M:%S",
                                                              time.localtime(second))
        return self._stamp


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


_NO_LOCK = _NoLock()


def access_message(scope: Any, status: int) -> str:
    """uvicorn's access line: ``client - "METHOD /path?query HTTP/1.1" status``."""
    client = scope.get("client")
    address = f"{client[0]}:{client[1]}" if client else ""
    path = quote(scope.get("root_path", "") + scope["path"])
    query = scope.get("query_string", b"")
    if query:
        path = redact_query(f"{path}?{query.decode('ascii', 'replace')}")
    return f'{address} - "{scope["method"]} {path} HTTP/{scope["http_version"]}" {status}'


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.set_name(HANDLER_NAME)
    handler.addFilter(RequestIdFilter())
    handler.addFilter(AccessLogRedactor())
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        # As the root says: a server run in this process before (its log_level) may have set
        # its own level on these loggers, and the access line would stay silent.
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [], True
        logger.setLevel(logging.NOTSET)
