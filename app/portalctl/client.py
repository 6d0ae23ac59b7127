"""The REST client: bearer token, problem details turned into exit codes, cursor paging."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

# Exit codes, as documented in `portalctl --help`.
OK, ERROR, USAGE, NOT_FOUND, FORBIDDEN = 0, 1, 2, 3, 4
EXIT_FOR_STATUS = {401: FORBIDDEN, 403: FORBIDDEN, 404: NOT_FOUND}
ATTEMPTS = 3
RETRY_PAUSE = 0.5


class ApiError(Exception):
    """A failed call, carrying the message for stderr and the exit code."""

    def __init__(self, message: str, exit_code: int = ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def problem_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    if not isinstance(body, dict):
        return f"HTTP {response.status_code}"
    detail = str(body.get("detail") or body.get("title") or f"HTTP {response.status_code}")
    fields = [f"  {e.get('field')}: {e.get('message')}" for e in body.get("errors") or []
              if isinstance(e, dict) and e.get("message") != detail]
    message = "\n".join([detail, *fields])
    if response.status_code == 401:
        message += "\n(sign in again: portalctl login --url URL)"
    return message


class Client:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, transport=transport,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Accept": "application/json"})

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, json: Any = None,
                params: dict[str, Any] | None = None, create: bool = False,
                idempotency_key: str | None = None) -> Any:
        response = self.send(method, path, json=json, params=params, create=create,
                             idempotency_key=idempotency_key)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as error:
            raise ApiError(f"{response.url} did not answer with JSON: is this the portal's "
                           "URL?") from error

    def send(self, method: str, path: str, *, json: Any = None,
             params: dict[str, Any] | None = None, create: bool = False,
             idempotency_key: str | None = None) -> httpx.Response:
        """The response of a call that succeeded; an ApiError otherwise."""
        headers = {}
        if create:
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        # A create is retried with the same key, so a lost answer never makes two of a thing.
        retriable = method == "GET" or create
        for attempt in range(1, ATTEMPTS + 1):
            try:
                response = self.http.request(method, path, json=json, params=params,
                                             headers=headers)
                break
            except httpx.TransportError as error:
                if not retriable or attempt == ATTEMPTS:
                    raise ApiError(f"cannot reach the portal: {error}") from error
                time.sleep(RETRY_PAUSE * attempt)
            except (httpx.HTTPError, httpx.InvalidURL) as error:
                raise ApiError(f"cannot reach the portal: {error}") from error
        if response.status_code >= 400:
            raise ApiError(problem_message(response),
                           EXIT_FOR_STATUS.get(response.status_code, ERROR))
        return response

    def download(self, path: str, **params: Any) -> Iterator[bytes]:
        """A GET's body a chunk at a time, as it arrives; an ApiError when the call fails."""
        query = {k: v for k, v in params.items() if v is not None}
        try:
            with self.http.stream("GET", path, params=query, headers={"Accept": "*/*"}) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(problem_message(response),
                                   EXIT_FOR_STATUS.get(response.status_code, ERROR))
                yield from response.iter_bytes()
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            raise ApiError(f"cannot reach the portal: {error}") from error

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def items(self, path: str, limit: int | None = None,
              **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a list (filtered by ``params``), following next_cursor; at most
        ``limit`` when given."""
        cursor: str | None = None
        seen = 0
        while True:
            page_size = min(200, limit - seen) if limit else 200
            page = self.get(path, limit=page_size, cursor=cursor, **params)
            for item in page["items"]:
                yield item
                seen += 1
                if limit and seen >= limit:
                    return
            cursor = page.get("next_cursor")
            if not cursor:
                return
