"""Jinja2 rendering shared by every HTML router."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
from fastapi.templating import Jinja2Templates
from jinja2.compiler import CodeGenerator, Frame
from jinja2.nodes import Expr
from starlette.requests import Request
from starlette.responses import HTMLResponse

from app.kit.format_characters import visible_format_characters
from app.kit.plurals import counted, plural
from app.web.names import gpu_class_label, gpu_class_text
from app.web.times import exact, time_tag

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = ROOT / "templates"
STATIC_DIR = ROOT / "static"


def _format_characters_shown(value: object) -> object:
    """Every {{ ... }} of every page: an invisible format character the input rules never saw
    (text stored before them, a name from the IdP, a message from a host) is written out
    rather than obeyed, so it cannot reorder or hide what a page shows."""
    return visible_format_characters(value) if isinstance(value, str) else value


def _public_escape(text: str) -> str:
    return str(markupsafe.escape(text))


# markupsafe's C escaping without the Markup object it wraps the result in; the public, slower
# way for a markupsafe without it.
_escaped_text: Callable[[str], str] = getattr(markupsafe, "_escape_inner", _public_escape)


def shown(value: object) -> str:
    """What every {{ ... }} of every page writes, in one call: Jinja's own code for it is
    ``escape(finalize(value))``, three Python calls and a Markup object per expression, about
    a sixth of the approval queue page's CPU. Same text: a format character written out
    (``_format_characters_shown``), then HTML-escaped unless it is markup already."""
    if type(value) is int:
        return str(value)
    if type(value) is str:
        return _escaped_text(value if value.isprintable() else visible_format_characters(value))
    finalized = _format_characters_shown(value)
    html = getattr(finalized, "__html__", None)
    return str(html()) if html is not None else _escaped_text(str(finalized))


class _ShownCode(CodeGenerator):
    """Compiles each {{ ... }} in autoescaped templates to one ``environment.shown(...)``."""

    def _output_child_pre(self, node: Expr, frame: Frame, finalize: Any) -> None:
        if _plain_autoescape(frame):
            self.write("environment.shown(")
        else:
            super()._output_child_pre(node, frame, finalize)

    def _output_child_post(self, node: Expr, frame: Frame, finalize: Any) -> None:
        if _plain_autoescape(frame):
            self.write(")")
        else:
            super()._output_child_post(node, frame, finalize)


def _plain_autoescape(frame: Frame) -> bool:
    return bool(frame.eval_ctx.autoescape) and not frame.eval_ctx.volatile


class _PortalEnvironment(jinja2.Environment):
    code_generator_class = _ShownCode
    shown = staticmethod(shown)


templates = Jinja2Templates(env=_PortalEnvironment(
    loader=jinja2.FileSystemLoader(TEMPLATES_DIR), autoescape=True,
    finalize=_format_characters_shown))
templates.env.globals["htmx_script"] = "vendor/htmx-2.0.11.min.js"
templates.env.globals["htmx_sse_script"] = "vendor/htmx-ext-sse-2.2.4.min.js"
templates.env.filters["when"] = time_tag
templates.env.filters["exact"] = exact
# {{ n | counted("node") }} is "1 node" or "4 nodes"; {{ n | plural("day") }} the noun alone.
templates.env.filters["counted"] = counted
templates.env.filters["plural"] = plural
templates.env.globals["gpu_class_label"] = gpu_class_label
templates.env.globals["gpu_class_text"] = gpu_class_text


def render(
    request: Request, template: str, context: dict[str, Any] | None = None, status_code: int = 200
) -> HTMLResponse:
    page = {
        "principal": getattr(request.state, "principal", None),
        "csrf_token": request.session.get("csrf", "") if "session" in request.scope else "",
        "request_id": getattr(request.state, "request_id", ""),
        "simulated_host": _simulated_host(request),
    }
    page.update(context or {})
    response = templates.TemplateResponse(request, template, page, status_code=status_code)
    response.headers["Vary"] = "HX-Request, Cookie"
    return response


def _simulated_host(request: Request) -> bool:
    settings = getattr(request.app.state, "settings", None)
    return bool(getattr(settings, "simulated_host", False))
