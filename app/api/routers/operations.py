"""Operations: health check (database reachable). Metrics are in `metrics.py`."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from app.api.deps import DatabaseDep
from app.api.schemas import HealthOut, error_responses
from app.errors import ServiceUnavailable

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
