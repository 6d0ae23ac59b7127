"""The ten-line verifier docs/operator.md §16 gives webhook receivers verifies what the portal
signs (one secret, or both while a rolled secret overlaps) and refuses a changed body, another
secret and an old timestamp."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.notifications import signing

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "operator.md"
BODY = b'{"specversion":"1.0","id":"4f6c2a9e","type":"dev.gpu-tenant-portal.cluster.ready"}'


def _verifier() -> Callable[..., str]:
    section = GUIDE.read_text().split("## 16. Notifications", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(code.strip().splitlines()) <= 14
    scope: dict[str, object] = {}
    exec(compile(code, str(GUIDE), "exec"), scope)  # noqa: S102 - the guide's own example
    verify = scope["verify"]
    assert callable(verify)
    return verify


def _headers(*secrets: str, at: float | None = None) -> dict[str, str]:
    stamp = int(time.time() if at is None else at)
    signed = signing.signed_headers("4f6c2a9e", stamp, BODY, list(secrets))
    return {name.title(): value for name, value in signed.items()}  # as a framework shows them


def test_the_guides_verifier_accepts_what_the_portal_signs() -> None:
    verify = _verifier()
    old, new = signing.new_secret(), signing.new_secret()
    assert verify(new, _headers(new), BODY) == "4f6c2a9e"
    # While a rolled secret overlaps, a receiver holding either verifies.
    assert verify(old, _headers(new, old), BODY) == "4f6c2a9e"
    assert verify(new, _headers(new, old), BODY) == "4f6c2a9e"


@pytest.mark.parametrize(("case", "says"), [
    ("changed body", "no valid signature"), ("another secret", "no valid signature"),
    ("ten minutes old", "too far from now")])
def test_the_guides_verifier_refuses(case: str, says: str) -> None:
    verify = _verifier()
    secret = signing.new_secret()
    headers = _headers(secret, at=time.time() - 600 if case == "ten minutes old" else None)
    body = BODY.replace(b"ready", b"failed") if case == "changed body" else BODY
    key = signing.new_secret() if case == "another secret" else secret
    with pytest.raises(ValueError, match=says):
        verify(key, headers, body)
