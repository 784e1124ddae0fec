"""Where a free answer runs: on the event loop when it is small, else in an answer thread.

Shared by the answer routers (marginals, counts, factored queries, SQL): the model
version a request found, loaded once, and the size limits below which its work stays
on the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from starlette.concurrency import run_in_threadpool

from app.api.concurrency import run_answer
from app.api.deps import DatabaseDep, DatasetAccess
from app.services import answers
from app.services import models as model_service
from app.services.models import LoadedModel

# Work answered on the event loop: at most this many cells in its largest intermediate
# table and in its answer, and at most this many factored queries in one batch. The
# rest goes to `run_answer`'s thread. On the 2M-row bench's 40-attribute model every
# 3-way marginal is within these (largest table 5.0 million cells, 8,800 answer cells)
# and took at most ~10 ms; the median 0.8 ms. A thread buys no throughput here (the
# work holds the interpreter lock) and costs a hop and lock hand-offs: it is there to
# keep a larger answer from stalling every other request on the loop.
INLINE_MAX_INTERMEDIATE_CELLS = 8_000_000
INLINE_MAX_ANSWER_CELLS = 20_000
# …and at most this many cells spanned by its steps in all (a sliced plan repeats its
# steps per slice): the bench's 3-way marginals span up to 20 million.
INLINE_MAX_WORK_CELLS = 32_000_000
INLINE_MAX_QUERIES = 16

Result = TypeVar("Result")


async def model_for(database: DatabaseDep, access: DatasetAccess) -> LoadedModel:
    """The version `access` found, loaded and calibrated (in a thread, the first time)."""
    if access.version is None:
        raise model_service.NoModel()
    loaded = answers.ready_model(access.dataset_id, access.version)
    if loaded is None:
        loaded = await run_in_threadpool(
            answers.load_ready_model, database, access.dataset_id, access.version
        )
    return loaded


def _small(size: answers.WorkSize) -> bool:
    return (
        size.intermediate_cells <= INLINE_MAX_INTERMEDIATE_CELLS
        and size.work_cells <= INLINE_MAX_WORK_CELLS
        and size.answer_cells <= INLINE_MAX_ANSWER_CELLS
    )


async def answer(size: answers.WorkSize, compute: Callable[[], Result]) -> Result:
    """Compute on the loop if the work is small, else in an answer thread."""
    if _small(size):
        return compute()
    return await run_answer(compute)
