"""The portal's own icon (static/favicon.svg), also where browsers look for it unasked."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import FileResponse

from app.web.templating import STATIC_DIR

router = APIRouter(include_in_schema=False)
ICON = STATIC_DIR / "favicon.svg"


@router.get("/favicon.ico")
def favicon() -> FileResponse:
    """Browsers ask for /favicon.ico on every page whatever the page links: the SVG answers."""
    return FileResponse(
        ICON, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"}
    )
