"""Counted nouns, said right: "1 node", "4 GPUs", "1.5 hours" (never "1 nodes" or "check(s)")."""

from __future__ import annotations


def plural(count: float, singular: str, plural_form: str | None = None) -> str:
    """The noun for ``count`` of it: singular for exactly one, else the plural (``+s`` unless
    given)."""
    if count == 1:
        return singular
    return plural_form if plural_form is not None else singular + "s"


def counted(count: float, singular: str, plural_form: str | None = None) -> str:
    """The number and its noun: ``counted(1, "node")`` is "1 node"."""
    number = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{number} {plural(count, singular, plural_form)}"
