"""Operations: liveness (/healthz) and readiness (/readyz); /metrics is in `metrics.py`.

`/healthz` answers 200 as long as the process serves requests: a load balancer or
orchestrator restarts the process when it does not. `/readyz` answers 200 only when
the database is reachable and its schema is the one this code needs, and 503 with the
reason otherwise (`unavailable`, `schema_not_current`): route traffic here only then.
"""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import SQLAlchemyError

from app.api.deps import DatabaseDep
from app.api.schemas import HealthOut, ReadyOut, error_responses
from app.errors import ServiceUnavailable
from app.migrations import check_schema_current, head_revision

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=HealthOut)
async def healthz() -> HealthOut:
    """Liveness: 200 while the process answers (the database is /readyz's business)."""
    return HealthOut(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses=error_responses(
        {503: "The database is unreachable, or its schema is not current (the reason says)."}
    ),
)
def readyz(database: DatabaseDep) -> ReadyOut:
    """200 when the database answers and its schema is current; 503 with the reason."""
    try:
        check_schema_current(database.engine)
    except SQLAlchemyError as error:
        cause = type(getattr(error, "orig", None) or error).__name__
        raise ServiceUnavailable(f"the database is unreachable ({cause})") from None
    return ReadyOut(status="ready", database="ok", schema_revision=head_revision())
