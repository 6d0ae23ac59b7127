"""Jinja2 rendering shared by every HTML router."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates
from starlette.requests import Request
from starlette.responses import HTMLResponse

from app.kit.format_characters import visible_format_characters
from app.kit.words import counted, plural
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


templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
templates.env.finalize = _format_characters_shown
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
