"""portalctl's one-shot listener for the browser login, spoken to over real loopback HTTP."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from app.portalctl.browser_login import Listener, LoginFailed, login_url


def _waiting(listener: Listener) -> tuple[threading.Thread, list[str | Exception]]:
    outcome: list[str | Exception] = []

    def wait() -> None:
        try:
            outcome.append(listener.wait(30))
        except LoginFailed as error:
            outcome.append(error)

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, outcome


def _answer(listener: Listener, path: str = "/callback", **fields: str) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{listener.port}{path}", data=fields, timeout=10)


def test_only_the_answer_with_the_state_counts_and_only_once() -> None:
    with Listener() as listener:
        thread, outcome = _waiting(listener)
        assert httpx.get(f"http://127.0.0.1:{listener.port}/favicon.ico").status_code == 404
        assert _answer(listener, "/elsewhere", state=listener.state, token="x").status_code == 404
        garbled = httpx.post(f"http://127.0.0.1:{listener.port}/callback",
                             content=b"x" * 20_000, timeout=10)
        assert garbled.status_code == 400
        done = _answer(listener, state=listener.state, token="gtp_secret")
        thread.join(10)
    assert done.status_code == 200 and "signed in" in done.text
    assert outcome == ["gtp_secret"]
    with pytest.raises(httpx.TransportError):  # closed after its one answer
        _answer(listener, state=listener.state, token="gtp_other")


@pytest.mark.parametrize(("fields", "reason"), [
    (lambda state: {"state": "another", "token": "gtp_x"}, "state"),
    (lambda state: {"token": "gtp_x"}, "state"),
    (lambda state: {"state": state, "error": "cancelled"}, "cancelled"),
    (lambda state: {"state": state}, "no token"),
])
def test_a_refused_answer_ends_the_login_with_its_reason(
    fields: Callable[[str], dict[str, str]], reason: str
) -> None:
    with Listener() as listener:
        thread, outcome = _waiting(listener)
        refused = _answer(listener, **fields(listener.state))
        thread.join(10)
    assert refused.status_code == 400
    assert isinstance(outcome[0], LoginFailed) and reason in str(outcome[0])


def test_each_login_has_its_own_state_and_port() -> None:
    with Listener() as one, Listener() as other:
        assert one.state != other.state and one.port != other.port
        assert len(one.state) >= 43


def test_the_link_carries_the_port_state_and_token_wishes() -> None:
    link = login_url("https://portal.example.com/", 5000, "abc", "my laptop", 7)
    assert link == ("https://portal.example.com/cli/login?port=5000&state=abc"
                    "&name=my+laptop&expires_in_days=7")
