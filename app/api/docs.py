"""The admin dashboard: Swagger UI at `/docs` and ReDoc at `/redoc`, working with no internet.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so on a machine without
internet `/docs` is a blank page. Here both pages load their JavaScript, CSS and
favicon from `/docs/assets/`, served from the installed `fastapi-offline` package,
which bundles current Swagger UI 5 and ReDoc builds (pinned by pip like any other
dependency, never copied into this repository). The pages themselves reference
nothing outside the service: no fonts, no validator badge. `/docs` links to the
dashboard (`GET /dashboard`, `app.api.routers.dashboard`).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from app.api import dashboard

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
ASSETS_URL = "/docs/assets"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"

SWAGGER_UI_PARAMETERS = {
    "persistAuthorization": True,  # the admin pastes the key once per browser session
    "displayRequestDuration": True,
    "validatorUrl": None,  # the validator badge is an image from an external service
}


def assets_directory() -> Path:
    """The folder of bundled Swagger UI / ReDoc files inside the installed package."""
    return Path(str(files("fastapi_offline") / "static"))


# Above Swagger UI: where the charts of budgets, jobs and models are (GET /dashboard).
DASHBOARD_LINK = (
    '<nav aria-label="privq" style="font-family: sans-serif; padding: 10px 20px 0;">'
    '<a href="{href}">Dashboard</a>: budgets, ledgers, jobs and models as charts.</nav>'
)


def with_dashboard_link(page: HTMLResponse, href: str) -> HTMLResponse:
    """`page` with a link to the dashboard at the top of its body."""
    html = bytes(page.body).decode("utf-8")
    linked = html.replace("<body>", "<body>\n" + DASHBOARD_LINK.format(href=href), 1)
    return HTMLResponse(linked, status_code=page.status_code)


def install_docs(app: FastAPI) -> None:
    """Add the offline Swagger UI and ReDoc pages and their assets to `app`.

    The app must be built with `docs_url=None, redoc_url=None` so FastAPI's CDN pages
    are not registered as well.
    """
    app.mount(ASSETS_URL, StaticFiles(directory=assets_directory()), name="docs-assets")

    def root(request: Request) -> str:
        return str(request.scope.get("root_path", ""))

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        prefix = root(request)
        page = get_swagger_ui_html(
            openapi_url=f"{prefix}{app.openapi_url}",
            title=f"{app.title} — admin dashboard",
            swagger_js_url=f"{prefix}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{prefix}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{prefix}{ASSETS_URL}/favicon.png",
            oauth2_redirect_url=f"{prefix}{OAUTH2_REDIRECT_URL}",
            swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
        )
        return with_dashboard_link(page, f"{prefix}{dashboard.URL}")

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_URL, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        prefix = root(request)
        return get_redoc_html(
            openapi_url=f"{prefix}{app.openapi_url}",
            title=f"{app.title} — API reference",
            redoc_js_url=f"{prefix}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{prefix}{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
