"""A template's add-ons as the clusters made from it install them.

The Helm values of an add-on are built here, by pure functions, from the settings the platform
admin wrote into the template version (dotted keys such as ``scheduler.replicas``). Nothing a
tenant sends reaches them: a cluster gets its template version's add-ons whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from app.clusters.shapes import ClusterAddon

Setting = str | int | bool


def addon_values(settings: Mapping[str, Setting]) -> dict[str, Any]:
    """Nested Helm values from dotted keys: {"a.b": 1} -> {"a": {"b": 1}}.

    Raises ValueError when one key is both a value and a section ("a" and "a.b").
    """
    values: dict[str, Any] = {}
    for key in sorted(settings):
        *sections, leaf = key.split(".")
        node = values
        for section in sections:
            child = node.setdefault(section, {})
            if not isinstance(child, dict):
                raise ValueError(f"setting {key!r}: {section!r} is a value and a section at once")
            node = child
        if leaf in node:
            raise ValueError(f"setting {key!r}: {leaf!r} is a value and a section at once")
        node[leaf] = settings[key]
    return values


def cluster_addons(stored: Iterable[Mapping[str, Any]]) -> tuple[ClusterAddon, ...]:
    """The add-ons of a template version (its stored ``addons`` JSON) for a cluster."""
    return tuple(
        ClusterAddon(name=addon["name"], repo=addon["repo"], chart=addon["chart"],
                     version=addon["version"],
                     values=addon_values(addon.get("settings") or {}))
        for addon in stored)


def merged_values(defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` over a chart's default values, section by section, as Helm merges them."""
    merged = dict(defaults)
    for key, value in given.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = merged_values(below, value)
        else:
            merged[key] = value
    return merged
