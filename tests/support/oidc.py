"""Driving the real authorization code flow against the local provider, as a browser would."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
from fastapi.testclient import TestClient


def register_user(issuer: str, sub: str, **claims: object) -> None:
    """Tells the local provider about a user and the claims it will assert."""
    response = httpx.put(f"{issuer}/users/{sub}", json={"email": sub, **claims})
    response.raise_for_status()


def start_login(client: TestClient, next_path: str = "/") -> str:
    response = client.get("/auth/login", params={"next": next_path}, follow_redirects=False)
    assert response.status_code == 302, response.text
    location: str = response.headers["location"]
    return location


def consent(authorize_url: str, sub: str) -> str:
    """The user picks an identity at the provider; returns where the provider sends them."""
    response = httpx.post(authorize_url, data={"sub": sub})
    assert response.status_code == 302, response.text
    return response.headers["location"]


def deny(authorize_url: str) -> str:
    response = httpx.post(authorize_url, data={"action": "deny"})
    assert response.status_code == 302, response.text
    return response.headers["location"]


def finish(client: TestClient, callback_url: str) -> httpx.Response:
    parts = urlsplit(callback_url)
    response: httpx.Response = client.get(f"{parts.path}?{parts.query}", follow_redirects=False)
    return response


def sign_in(client: TestClient, sub: str, next_path: str = "/") -> httpx.Response:
    response = finish(client, consent(start_login(client, next_path), sub))
    assert response.status_code == 303, response.text
    return response


def query_of(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)
