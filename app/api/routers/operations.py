"""Operations: health check (database reachable) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy import text

from app.api.deps import DatabaseDep
from app.api.schemas import HealthOut, error_responses
from app.errors import ServiceUnavailable
from app.metrics import CONTENT_TYPE, render_latest

router = APIRouter(tags=["operations"])


@router.get(
    "/healthz",
    response_model=HealthOut,
    responses=error_responses({503: "The database is unreachable."}),
)
def healthz(database: DatabaseDep) -> HealthOut:
    """200 when the database answers."""
    try:
        with database.read_only() as session:
            session.execute(text("SELECT 1"))
    except Exception:
        raise ServiceUnavailable("the database is unreachable") from None
    return HealthOut(status="ok", database="ok")


@router.get("/metrics", response_class=Response)
def metrics() -> Response:
    """Prometheus text exposition: request counts and latencies, ρ charged."""
    return Response(content=render_latest(), media_type=CONTENT_TYPE)
