"""The heartbeat of a running job: its lease renewed, its progress kept fresh.

A thread per running job renews the job's lease (and the fit locks the worker holds)
every third of `lease_seconds`, drops the cached records of purged datasets, and — when
the job itself has reported nothing for `KEEPALIVE_SECONDS`, as during one long sparse
factorisation — rewrites its last report with the ETA counted down and `updated_at`
now, so a running job's progress is never older than a few seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Protocol, Self

from sqlalchemy.exc import OperationalError

from app.config import Settings
from app.db import Database
from app.services import fits, jobs

logger = logging.getLogger(__name__)


class Beating(Protocol):
    """What the heartbeat needs of its worker (`app.worker.runner.Worker`)."""

    settings: Settings
    database: Database
    worker_id: str

    @property
    def held_fit_locks(self) -> Iterable[str]: ...

    def keep_progress_alive(self, job_id: str) -> bool: ...

    def forget_retired_columns(self) -> None: ...


# The longest a running job's progress goes unwritten: the heartbeat rewrites the last
# report (its ETA counted down, `updated_at` now) when nothing else has for this long.
KEEPALIVE_SECONDS = 2.0


class Heartbeat:
    """While a job runs: renews its lease (and fit locks in use), keeps its progress
    fresh, forgets purged records."""

    def __init__(self, worker: Beating, job_id: str) -> None:
        self.worker = worker
        self.job_id = job_id
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="privq-heartbeat", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        interval = max(0.05, self.worker.settings.lease_seconds / 3)
        renewed = time.monotonic()
        while not self._stop.wait(min(interval, KEEPALIVE_SECONDS / 2)):
            try:
                # A step with no report of its own (one sparse factorisation, a long scan)
                # still shows the job alive: within about KEEPALIVE_SECONDS + 1 s.
                if not self.worker.keep_progress_alive(self.job_id):
                    self.lost.set()
                    return
                if time.monotonic() - renewed < interval:
                    continue
                renewed = time.monotonic()
                with self.worker.database.unit_of_work() as session:
                    held = jobs.renew(
                        session,
                        job_id=self.job_id,
                        owner=self.worker.worker_id,
                        lease_seconds=self.worker.settings.lease_seconds,
                    )
                if not held:
                    self.lost.set()
                    return
                for dataset_id in list(self.worker.held_fit_locks):
                    fits.renew(
                        self.worker.database,
                        dataset_id,
                        owner=self.worker.worker_id,
                        lease_seconds=self.worker.settings.lease_seconds,
                    )
                # Busy too, drop purged datasets' records (a keyed read; none if none cached).
                self.worker.forget_retired_columns()
            except OperationalError:
                logger.warning("lease renewal failed; retrying", exc_info=True)
