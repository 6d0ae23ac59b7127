"""What the browser saw during a test, told when the test fails: every answer to a form or an
htmx write and every answer of 400 or more, every request that never got one, errors on the
console, and where each page stands with the alerts it shows. A browser test that times out
otherwise says only what it waited for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Error,
    Page,
    Request,
    Response,
)


@dataclass
class BrowserEvents:
    lines: list[str] = field(default_factory=list)
    contexts: list[BrowserContext] = field(default_factory=list)

    def watch(self, context: BrowserContext) -> BrowserContext:
        self.contexts.append(context)
        context.on("response", self._answered)
        context.on("requestfailed", self._failed)
        context.on("console", self._console)
        return context

    def _answered(self, response: Response) -> None:
        request = response.request
        if response.status >= 400 or request.method != "GET":
            redirect = response.headers.get("hx-redirect") or response.headers.get("location")
            to = f" to {redirect}" if redirect else ""
            self.lines.append(f"{response.status}{to} {request.method} {response.url}")

    def _failed(self, request: Request) -> None:
        self.lines.append(f"no answer ({request.failure}) {request.method} {request.url}")

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in {"error", "warning"}:
            self.lines.append(f"console {message.type}: {message.text}")

    def report(self) -> str:
        pages = [_where(page) for context in self.contexts for page in context.pages]
        return "\n".join([*self.lines, *pages]) or "nothing seen"


def _where(page: Page) -> str:
    try:
        alerts = page.locator("[role=alert], .toast").all_inner_texts()
    except Error as error:  # a closed page or a browser gone says so instead
        return f"page {page.url}: {error.message.splitlines()[0]}"
    shown = "; ".join(text.strip() for text in alerts if text.strip()) or "none"
    return f"page {page.url}, alerts shown: {shown}"


def watched(browser: Browser, events: BrowserEvents) -> Callable[..., BrowserContext]:
    """``browser.new_context`` recording the events of each context it opens into ``events``."""
    open_context = browser.new_context

    def new_context(*args: Any, **kwargs: Any) -> BrowserContext:
        return events.watch(open_context(*args, **kwargs))

    return new_context
