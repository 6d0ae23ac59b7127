"""Unicode format characters (category Cf): invisible, yet they reorder or hide the text
around them ("acme", U+202E, "gnp.exe" reads as "acmeexe.png"). Standard library only:
portalctl uses it too."""

from __future__ import annotations

import unicodedata


def first_format_character(text: str) -> str | None:
    if text.isprintable():  # fast: printable text holds no format character
        return None
    return next((c for c in text if unicodedata.category(c) == "Cf"), None)


def describe(character: str) -> str:
    """``U+202E (RIGHT-TO-LEFT OVERRIDE)``: a character named so that anyone can look it up."""
    name = unicodedata.name(character, "")
    return f"U+{ord(character):04X}" + (f" ({name})" if name else "")


# Line breaks and tabs are not printable, yet not format characters either: text without a
# format character is printable once they are gone (a test of the C library, not a walk in
# Python over every character of, say, a multi-line SVG chart).
_LINE_BREAKS_AND_TABS = str.maketrans("", "", "\n\r\t")


def visible_format_characters(text: str) -> str:
    """``text`` with each format character written out ("acme[U+202E]gnp.exe"): for text
    the input rules never saw (stored before them, or from an IdP or a host)."""
    if text.isprintable() or str.translate(text, _LINE_BREAKS_AND_TABS).isprintable():
        return text
    # replace() keeps the type: markupsafe's Markup stays Markup, escaping what it inserts.
    for hidden in {c for c in text if unicodedata.category(c) == "Cf"}:
        text = text.replace(hidden, f"[U+{ord(hidden):04X}]")
    return text
