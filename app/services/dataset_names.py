"""A dataset named on the operator's command line: by its id, or by its name where no
other dataset bears it.

An id always wins (a name that happens to equal another dataset's id names that one).
A name several datasets share is refused with their ids, so the operator can pick one;
a deleted dataset is never found.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Dataset
from app.errors import NotFound, PrivqError

# How many of the datasets sharing a name the refusal lists.
LISTED_IDS = 20


class AmbiguousDatasetName(PrivqError, status=409, code="ambiguous_name"):
    """Several datasets bear the name given: it does not say which one."""


def resolve(session: Session, reference: str, *, deleted_ids: bool = False) -> str:
    """The id of the dataset `reference` names (its id, or its unique name). With
    `deleted_ids` a deleted dataset's id is taken too (a filter over the ledger or jobs,
    which keep their lines)."""
    by_id_query = select(Dataset.id).where(Dataset.id == reference)
    if not deleted_ids:
        by_id_query = by_id_query.where(Dataset.deleted_at.is_(None))
    by_id = session.scalar(by_id_query)
    if by_id is not None:
        return str(by_id)
    rows = session.execute(
        select(Dataset.id, Dataset.created_at)
        .where(Dataset.name == reference, Dataset.deleted_at.is_(None))
        .order_by(Dataset.created_at, Dataset.id)
    ).all()
    if len(rows) == 1:
        return str(rows[0].id)
    if not rows:
        raise NotFound(f"dataset not found: no dataset has the id or the name {reference!r}")
    listed = "; ".join(
        f"{row.id} (created {row.created_at:%Y-%m-%d %H:%M})" for row in rows[:LISTED_IDS]
    )
    more = f"; and {len(rows) - LISTED_IDS} more" if len(rows) > LISTED_IDS else ""
    raise AmbiguousDatasetName(
        f"{len(rows)} datasets are named {reference!r}: give one of their ids instead: "
        f"{listed}{more}"
    )
