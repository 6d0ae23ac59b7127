"""The API's reference pages, Swagger UI at ``/docs`` and ReDoc at ``/redoc``, from the files
vendored under ``static/vendor/`` (FastAPI's own pages load them from a CDN: blank offline)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse

from app.http.middleware import CONTENT_SECURITY_POLICY
from app.web.templating import render

router = APIRouter(include_in_schema=False)

SWAGGER_UI = "vendor/swagger-ui-bundle-5.35.0.js"
SWAGGER_UI_CSS = "vendor/swagger-ui-5.35.0.css"
REDOC = "vendor/redoc-2.5.4.standalone.js"
# ReDoc styles itself through styled-components, which writes <style> elements, and indexes
# its search in a worker made from a blob of its own code; pages' scripts stay 'self' only.
REDOC_POLICY = (
    CONTENT_SECURITY_POLICY.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
    + "; worker-src 'self' blob:"
)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return render(request, "api_docs/swagger.html", _pages(request))


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    response = render(request, "api_docs/redoc.html", _pages(request))
    response.headers["Content-Security-Policy"] = REDOC_POLICY
    return response


def _pages(request: Request) -> dict[str, str]:
    return {
        "openapi_url": request.app.openapi_url,
        "swagger_ui_script": SWAGGER_UI,
        "swagger_ui_css": SWAGGER_UI_CSS,
        "redoc_script": REDOC,
    }
