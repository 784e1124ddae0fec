"""Jobs: list them (a tenant its own; the admin all), newest first, with filters; cancel one.

`GET /v1/jobs/{id}` is beside the routes that create jobs (`measurements.py`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session

from app.api.concurrency import write_endpoint
from app.api.deps import PrincipalDep
from app.api.openapi import refusals
from app.api.pagination import DatasetFilter, PageDep, paged_list
from app.api.routers.measurements import JobOut
from app.api.types import ResourceId
from app.errors import JobFinished, NotFound
from app.services import jobs as job_service
from app.services import queue as queue_service

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


@paged_list(router, JobOut, summary="List jobs, newest first (a tenant sees only its own)")
def list_jobs(
    session: Session,
    principal: PrincipalDep,
    page: PageDep,
    dataset_id: DatasetFilter = None,
    status: Annotated[
        JobStatus | None, Query(description="Only jobs in this state.", examples=["queued"])
    ] = None,
    kind: Annotated[
        str | None,
        Query(
            pattern=r"^[a-z_]{1,32}$",
            description="Only jobs of this kind (`measure`, `aim`, `mwem`, …).",
            examples=["measure"],
        ),
    ] = None,
) -> list[JobOut]:
    """Jobs newest first, filtered by dataset, status and kind. A tenant sees the jobs it
    submitted and no other tenant's, whatever the filters; the admin sees every job. A
    queued job has its `queue_position`."""
    found = job_service.list_jobs(
        session,
        tenant_id=principal.tenant_id,
        dataset_id=dataset_id,
        status=status,
        kind=kind,
        limit=page.limit,
        cursor=page.cursor,
    )
    page.link_next(found.next_cursor)
    positions = queue_service.positions(session, found.items)
    return [JobOut.of(job, positions.get(job.id)) for job in found.items]


@router.post(
    "/{job_id}/cancel",
    response_model=JobOut,
    summary="Cancel a job: a queued one is refunded whole, a running one stops and "
    "refunds what it had not used",
    responses=refusals(NotFound, JobFinished, not_found="No such job (or not yours)."),
)
@write_endpoint
def cancel_job(job_id: ResourceId, session: Session, principal: PrincipalDep) -> JobOut:
    """The job's owner or the admin. A queued job becomes `cancelled` and its whole charge
    is refunded (a refund line of its own in the ledger). A running job stops at its next
    safe point and refunds exactly the ρ it had not used yet; noise already drawn stays
    charged and stays in the model. Cancelling a cancelled job changes nothing; a
    finished one is 409 `job_finished`."""
    job = job_service.get(session, job_id, tenant_id=principal.tenant_id, for_update=True)
    job_service.cancel(session, job)
    return JobOut.of(job)
