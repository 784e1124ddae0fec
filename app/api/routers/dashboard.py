"""The dashboard: `GET /dashboard`, a page that draws budgets, jobs and models.

The page and its assets come from the package (`app.api.dashboard`), so it works with
no internet. It holds no data of its own: it signs in with a key the user types (kept
in the browser's session storage) and reads the public API with it, so it shows
exactly what that key may read, nothing more. Not part of the OpenAPI document.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import dashboard
from app.errors import NotFound

router = APIRouter(tags=["dashboard"], include_in_schema=False)


PAGE_HEADERS = {
    "Content-Security-Policy": dashboard.CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
# Assets change only with the installed package; the page is revalidated each time.
ASSET_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "public, max-age=3600",
}


@router.get(dashboard.URL)
async def dashboard_page() -> Response:
    """The dashboard's page (its scripts sign in and call the API)."""
    page = dashboard.asset(dashboard.PAGE)
    if page is None:  # a broken installation, not a client's mistake
        raise RuntimeError("the dashboard's index.html is missing from the package")
    return Response(page.body, media_type=page.media_type, headers=PAGE_HEADERS)


@router.get(dashboard.ASSETS_URL + "/{name:path}")
async def dashboard_asset(name: str) -> Response:
    """One of the dashboard's files: its script, styles and the vendored Vega builds."""
    found = dashboard.asset(name)
    if found is None:
        raise NotFound("the dashboard has no such file")
    return Response(found.body, media_type=found.media_type, headers=ASSET_HEADERS)
