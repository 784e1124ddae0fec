"""`GET /metrics`: Prometheus text exposition, behind the admin key unless made public.

The numbers are operational (request rates, job queue, fits, ρ by dataset) and name
dataset ids, so by default only the admin key may read them;
`PRIVQ_METRICS_PUBLIC=true` opens them to a scraper that holds no key.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials

from app.api.deps import DatabaseDep, SettingsDep, bearer_scheme, get_principal, require_admin
from app.api.openapi import refusals
from app.errors import Forbidden, Unauthorized
from app.metrics import CONTENT_TYPE, render_latest
from app.services.gauges import DatabaseGauges

router = APIRouter(tags=["operations"])


async def metrics_access(
    request: Request,
    settings: SettingsDep,
    database: DatabaseDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    background_tasks: BackgroundTasks,
) -> None:
    """Let the request through if metrics are public, or it carries the admin key."""
    if settings.metrics_public:
        return
    principal = await get_principal(request, settings, database, credentials, background_tasks)
    await require_admin(principal)


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics (admin key unless PRIVQ_METRICS_PUBLIC=true)",
    responses={
        200: {
            "content": {"text/plain": {"example": 'privq_jobs{status="queued"} 3.0\n'}},
            "description": "Prometheus text format 0.0.4.",
        },
        **refusals(
            Unauthorized,
            Forbidden,
            forbidden="A tenant key was sent; metrics need the admin key.",
        ),
    },
    dependencies=[Depends(metrics_access)],
)
def metrics(request: Request) -> Response:
    """Requests and latencies by route, the job queue, jobs and fits, ρ by dataset, 5xx."""
    return Response(content=render_latest(database_gauges(request)), media_type=CONTENT_TYPE)


def database_gauges(request: Request) -> DatabaseGauges:
    """The app's collector of queue and model state (one per app: it caches model sizes)."""
    state = request.app.state
    gauges: DatabaseGauges | None = getattr(state, "database_gauges", None)
    if gauges is None:
        gauges = state.database_gauges = DatabaseGauges(state.database)
    return gauges
