"""A tiny stand-in for Prometheus' query API on loopback: it answers ``/api/v1/query`` and
``/api/v1/query_range`` in Prometheus' JSON shapes with the series a test gives it, and servers
that refuse or never answer, for the paths where Prometheus cannot say."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from app.lab.ports import free_port
from tests.support.http_servers import served

Labels = Mapping[str, str]


@dataclass
class Answers:
    """Per query text: the (labels, value) of an instant query; range queries answer each
    series of ``range_values`` with its values at every step asked for."""

    instant: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    range_values: list[tuple[Labels, float]] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)


def _vector(series: list[tuple[Labels, float]], at: float) -> dict[str, Any]:
    return {"resultType": "vector",
            "result": [{"metric": dict(labels), "value": [at, str(value)]}
                       for labels, value in series]}


def _matrix(series: list[tuple[Labels, float]], start: float, end: float,
            step: float) -> dict[str, Any]:
    steps = [start + n * step for n in range(int((end - start) // step) + 1)]
    return {"resultType": "matrix",
            "result": [{"metric": dict(labels), "values": [[at, str(value)] for at in steps]}
                       for labels, value in series]}


def _handler(answers: Answers) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            asked = {k: v[0] for k, v in parse_qs(url.query).items()}
            answers.asked.append(asked.get("query", ""))
            if url.path == "/api/v1/query":
                data = _vector(answers.instant.get(asked["query"], []),
                               float(asked.get("time", "0")))
            elif url.path == "/api/v1/query_range":
                data = _matrix(answers.range_values, float(asked["start"]),
                               float(asked["end"]), float(asked["step"]))
            else:
                self.send_error(404)
                return
            body = json.dumps({"status": "success", "data": data}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def fake_prometheus(answers: Answers) -> Iterator[str]:
    """Its base URL while the block runs."""
    with served(_handler(answers)) as port:
        yield f"http://127.0.0.1:{port}"


@contextmanager
def silent_prometheus() -> Iterator[str]:
    """A port that accepts connections and never answers a byte."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def refusing_url() -> str:
    """A loopback port nothing listens on: connections are refused at once."""
    return f"http://127.0.0.1:{free_port()}"
