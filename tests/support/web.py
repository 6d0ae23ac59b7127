"""What web tests send and read: HTML accept headers, the page's CSRF token, htmx headers."""

from __future__ import annotations

import re

from app.lab.ports import free_port as free_port

HTML = {"accept": "text/html"}


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, "no csrf token on the page"
    return match.group(1)


def htmx(csrf: str) -> dict[str, str]:
    return {"HX-Request": "true", "X-CSRF-Token": csrf}
