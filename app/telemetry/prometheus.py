"""A client for the operator's Prometheus HTTP API: instant and range queries, each answer
within one deadline shared by every query of a reading, or ``Unavailable`` with the reason.

Nothing here waits without bound: a connection that is refused fails at once, a server that
never answers or dribbles its answer fails at the deadline, an answer past ``MAX_BYTES`` is
refused. Callers show ``Unavailable`` as "unknown", never as zero.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

QUERY_PATH = "/api/v1/query"
RANGE_PATH = "/api/v1/query_range"
MAX_BYTES = 32 * 1024 * 1024


class Unavailable(Exception):
    """Prometheus gave no usable answer; ``reason`` says why in an operator's words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Sample:
    """One series of an instant query: its labels and its value."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels and its (unix seconds, value) points."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


class Prometheus:
    """Queries against ``base_url`` that all end by ``timeout_seconds`` after this was made."""

    def __init__(self, base_url: str | None, timeout_seconds: float,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/") if base_url else None
        self.deadline = time.monotonic() + timeout_seconds
        self.transport = transport

    def instant(self, query: str, at: datetime | None = None) -> list[Sample]:
        params = {"query": query, **({"time": f"{at.timestamp():.3f}"} if at else {})}
        data = self._get(QUERY_PATH, params, "vector")
        return [Sample(item["metric"], value) for item in data
                if (value := _number(item["value"][1])) is not None]

    def range(self, query: str, start: datetime, end: datetime,
              step_seconds: int) -> list[Series]:
        params = {"query": query, "start": f"{start.timestamp():.3f}",
                  "end": f"{end.timestamp():.3f}", "step": str(step_seconds)}
        data = self._get(RANGE_PATH, params, "matrix")
        return [Series(item["metric"], tuple(
            (float(at), value) for at, raw in item["values"]
            if (value := _number(raw)) is not None)) for item in data]

    def _get(self, path: str, params: dict[str, str], result_type: str) -> list[Any]:
        if self.base_url is None:
            raise Unavailable("PORTAL_PROMETHEUS_URL is not set")
        body = self._read(self.base_url + path, params)
        try:
            data = body["data"]
            if body.get("status") != "success" or data["resultType"] != result_type:
                raise Unavailable(f"Prometheus refused the query: {body.get('error', '')}"[:300])
            return list(data["result"])
        except (KeyError, TypeError) as error:
            raise Unavailable("Prometheus answered in an unknown shape") from error

    def _read(self, url: str, params: dict[str, str]) -> Any:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Unavailable("Prometheus did not answer in time")
        try:
            with httpx.Client(timeout=left, transport=self.transport,
                              follow_redirects=False) as client, \
                    client.stream("GET", url, params=params) as response:
                chunks = []
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > self.deadline:
                        raise Unavailable("Prometheus did not answer in time")
                    if sum(map(len, chunks)) > MAX_BYTES:
                        raise Unavailable("Prometheus answered more than the portal reads")
                if response.status_code >= 300 and response.status_code not in (400, 422):
                    raise Unavailable(f"Prometheus answered HTTP {response.status_code}")
                return httpx.Response(response.status_code, content=b"".join(chunks)).json()
        except httpx.TimeoutException as error:
            raise Unavailable("Prometheus did not answer in time") from error
        except httpx.HTTPError as error:
            raise Unavailable(f"Prometheus is unreachable ({type(error).__name__})") from error
        except ValueError as error:
            raise Unavailable("Prometheus answered something that is not JSON") from error


def _number(raw: Any) -> float | None:
    """A sample's value (Prometheus sends it as a string); NaN and infinities are no figure."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
