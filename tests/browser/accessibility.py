"""axe-core in a page: what it finds that is serious or critical."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")


@dataclass(frozen=True)
class Violation:
    rule: str
    impact: str
    help: str
    targets: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.impact} {self.rule} ({self.help}): {', '.join(self.targets[:5])}"


def serious_violations(page: Page) -> list[Violation]:
    """Runs axe on the page as shown (the context needs ``bypass_csp``: axe is injected inline,
    which the portal's Content-Security-Policy rightly refuses)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    results: dict[str, Any] = page.evaluate(
        "async () => await axe.run(document, {resultTypes: ['violations']})")
    return [
        Violation(v["id"], v["impact"], v["help"],
                  tuple(" ".join(node["target"]) for node in v["nodes"]))
        for v in results["violations"] if v.get("impact") in BLOCKING
    ]
