"""What a colour means, the same on every chart: each kind of figure keeps one colour and one
pattern wherever it is drawn, and GPU classes take theirs from a separate fixed palette, so
that "approved" on one chart never looks like "H100" on the next."""

from __future__ import annotations

from collections.abc import Iterable

from app.web.charts.svg import Series

# Kinds of figure: (label, colour, pattern).
KINDS: dict[str, tuple[str, str, str]] = {
    "capacity": ("Capacity", "#1c2430", "outline"),
    "approved": ("Approved", "#2f6f4f", "solid"),
    "guaranteed": ("Guaranteed", "#2f6f4f", "hatch"),
    "allocated": ("Allocated", "#1f4e8c", "hatch"),
    "dedicated": ("Dedicated", "#6a3d9a", "solid"),
    "in-use": ("In use", "#c47f17", "dots"),
    "burst": ("Burst", "#b0306a", "cross"),
    "free": ("Free", "#5b6675", "outline"),
    "not-ready": ("Not ready", "#a32020", "cross"),
}
# GPU classes, in the order the portal first knew them; none of these is a kind's colour.
CLASS_COLOURS = (
    "#00838f",
    "#7f4f24",
    "#6b8e23",
    "#4fa3d9",
    "#e377a4",
    "#c2a83e",
    "#005f73",
    "#9e6b9e",
)
# With their own pattern as well, so that stacked classes read without colour.
CLASS_PATTERNS = ("solid", "hatch", "dots", "cross", "backhatch", "grid")


def kind(kind_: str, label: str | None = None, key: str | None = None) -> Series:
    """The series of one kind of figure, optionally under a more precise label and key."""
    name, colour, pattern = KINDS[kind_]
    return Series(key or kind_, label or name, colour, pattern)


def class_styles(classes: Iterable[tuple[int, str]]) -> dict[str, tuple[str, str]]:
    """(colour, pattern) per class name, given every class as (id, name): in the order the
    portal first knew them, so that a class keeps its colour on every page and a new class
    never takes another's."""
    return {
        name: (CLASS_COLOURS[n % len(CLASS_COLOURS)], CLASS_PATTERNS[n % len(CLASS_PATTERNS)])
        for n, (_id, name) in enumerate(sorted(classes))
    }
