"""How every page names things it shows in many places, so that they read alike everywhere."""

from __future__ import annotations

from functools import lru_cache

from markupsafe import Markup, escape


def gpu_class_name(display_name: str | None, product: str | None) -> str:
    """The one name of a GPU class, wherever it is named (charts, tables, menus): its display
    name, or its product label while it has none."""
    return display_name or product or ""


def gpu_class_text(display_name: str | None, product: str | None) -> str:
    """A GPU class where only text fits (a menu option, a title): its display name, then the
    product label GPU Feature Discovery gives its nodes."""
    name = gpu_class_name(display_name, product)
    if product and product != name:
        return f"{name} ({product})"
    return name


@lru_cache(maxsize=1024)
def gpu_class_label(display_name: str | None, product: str | None) -> Markup:
    """A GPU class on a page: its display name, and the product label below it in a smaller
    line (and as its title), for operators who match it against node labels."""
    name = gpu_class_name(display_name, product)
    if not name:
        return Markup('<span class="gpu-class gpu-class-none">no GPU class</span>')
    secondary = ""
    if product and product != name:
        secondary = f'<code class="gpu-class-product">{escape(product)}</code>'
    # A page names the same few classes on every row: the label is made once (a pure function
    # of its two strings; Markup is immutable).
    return Markup(  # noqa: S704 - both strings went through escape()
        f'<span class="gpu-class" title="{escape(product or name)}">'
        f'<span class="gpu-class-name">{escape(name)}</span>{secondary}</span>')
