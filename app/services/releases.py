"""What a caller sees of a dataset's released measurements: every release, its own metadata.

A noisy measurement, once stored, is a differentially private release: every grantee
of the dataset may read its attributes, noise, ρ and values (the model is fitted on
all of them anyway). Who bought it, and how, is not part of the release: the job that
made it and a mechanism round's details (what it selected, with which scores, from
which workload) describe another tenant's analysis. A tenant therefore sees those only
for its own jobs; the admin sees them for every job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Job, MeasurementRecord
from app.services import measurements as measurement_service
from app.services.pages import Page


@dataclass(frozen=True)
class Release:
    """One measurement as the caller may see it: `own` is False for another tenant's job
    (its `job_id` and `details` are then not shown)."""

    record: MeasurementRecord
    own: bool

    @property
    def job_id(self) -> str | None:
        return self.record.job_id if self.own else None

    @property
    def details(self) -> dict[str, Any] | None:
        return self.record.details if self.own else None


def own_job_ids(session: Session, job_ids: Iterable[str], tenant_id: str) -> set[str]:
    """Those of `job_ids` that are jobs of `tenant_id`."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return set()
    return set(
        session.scalars(select(Job.id).where(Job.id.in_(wanted), Job.tenant_id == tenant_id))
    )


def page_for(
    session: Session,
    dataset_id: str,
    *,
    tenant_id: str | None,
    limit: int,
    cursor: str | None = None,
) -> Page[Release]:
    """One page of the dataset's releases, oldest first, as `tenant_id` (None: the admin)
    may see them. The caller has checked that the tenant may see the dataset."""
    found = measurement_service.page_for_dataset(session, dataset_id, limit=limit, cursor=cursor)
    if tenant_id is None:
        return Page([Release(record, own=True) for record in found.items], found.next_cursor)
    own = own_job_ids(session, (record.job_id for record in found.items), tenant_id)
    return Page(
        [Release(record, own=record.job_id in own) for record in found.items], found.next_cursor
    )
