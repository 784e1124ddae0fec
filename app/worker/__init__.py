"""The job door: `Worker` (claim, run, finish or give back a job: `runner`) and the
processes that run workers (`privq worker`, those beside `privq serve`, and how they
stop: `processes`). It never imports `app.api`."""

from app.worker.heartbeat import Heartbeat
from app.worker.processes import (
    MULTIPROCESS_DIRECTORY_VARIABLE,
    EmbeddedWorkers,
    GracefulStop,
    run_worker,
    start_embedded_workers,
)
from app.worker.runner import Worker, internal_error_message

__all__ = [
    "MULTIPROCESS_DIRECTORY_VARIABLE",
    "EmbeddedWorkers",
    "GracefulStop",
    "Heartbeat",
    "Worker",
    "internal_error_message",
    "run_worker",
    "start_embedded_workers",
]
