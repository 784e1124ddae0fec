"""Worker processes: `privq worker`, the workers `privq serve` starts beside the API, and
how each of them stops.

The first SIGTERM (or Ctrl-C for `privq worker`) asks the worker to stop at the job's
next safe point (`Worker.request_stop`): the job goes back to the queue with its attempt
taken back, and the process exits 0. A second signal, or `worker_stop_grace_seconds`
without reaching a safe point, forces the stop: the job is handed back at once but the
attempt stays counted (it was not at a safe point; the lost-access rule of
`app.services.gate` covers anything in flight).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess

from app import metrics
from app.config import Settings
from app.db import Database
from app.worker.runner import Worker

logger = logging.getLogger("privq.worker")

# prometheus-client reads this when first imported: set, it keeps metrics in files there.
MULTIPROCESS_DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

# After the grace ran out and the forced stop was signalled: if the main thread is still
# inside native code this much later, the process exits without cleaning up.
HARD_EXIT_SECONDS = 5.0

# What `privq serve` waits for its workers beyond their stop grace before killing them.
EMBEDDED_STOP_MARGIN_SECONDS = 5.0


class GracefulStop:
    """A worker process's signal handler: first signal, stop at a safe point; second
    signal (or the grace over), a forced stop (SystemExit in the main thread)."""

    def __init__(self, worker: Worker, grace_seconds: float) -> None:
        self.worker = worker
        self.grace_seconds = grace_seconds
        self.signals = 0

    def install(self, signals: Sequence[signal.Signals]) -> None:
        for signum in signals:
            signal.signal(signum, self)

    def __call__(self, signum: int, _frame: object) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            logger.info(
                "stop requested; the job in hand stops at its next safe point",
                extra={"signal": name, "grace_seconds": self.grace_seconds},
            )
            self.worker.request_stop()
            timer = threading.Thread(target=self._grace_over, name="privq-stop-grace", daemon=True)
            timer.start()
            return
        logger.warning("forced stop", extra={"signal": name})
        raise SystemExit(1)

    def _grace_over(self) -> None:
        time.sleep(self.grace_seconds)
        logger.warning(
            "no safe point within the stop grace; forcing the stop",
            extra={"grace_seconds": self.grace_seconds},
        )
        os.kill(os.getpid(), signal.SIGTERM)  # handled as the second signal, in the main thread
        time.sleep(HARD_EXIT_SECONDS)
        os._exit(1)


def run_worker(
    settings: Settings,
    *,
    once: bool = False,
    alive: Callable[[], bool] | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    stop_signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
) -> None:
    """`privq worker`: run jobs until stopped (or, with `once`, until idle).

    `stop_signals` ask for a graceful stop (`GracefulStop`). With `metrics_port`, the
    worker serves its own `/metrics` there (`app.metrics_server`).
    """
    database = Database.from_settings(settings)
    worker = Worker(database, settings)
    stop_metrics: Callable[[], None] | None = None
    if metrics_port is not None:
        from app.metrics_server import start_metrics_server

        _server, stop_metrics = start_metrics_server(
            settings, database, port=metrics_port, host=metrics_host
        )
    GracefulStop(worker, settings.worker_stop_grace_seconds).install(stop_signals)
    try:
        if once:
            worker.run_until_idle()
        else:
            worker.run_forever(alive=alive)
        if worker.stopping.is_set():
            logger.info("worker stopped", extra={"worker_id": worker.worker_id})
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        if stop_metrics is not None:
            stop_metrics()
        database.dispose()


def _embedded_main(settings: Settings, parent_pid: int) -> None:
    from app.logs import configure_logging

    configure_logging(settings.log_level)
    with contextlib.suppress(OSError):
        os.nice(5)  # the API answers first; fits use what is left
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    run_worker(settings, alive=lambda: os.getppid() == parent_pid, stop_signals=(signal.SIGTERM,))


class EmbeddedWorkers:
    """The worker processes beside `privq serve`. Calling it stops them: a SIGTERM each
    (unless `signal` already sent it), then up to their stop grace to reach a safe point."""

    def __init__(
        self, processes: list[BaseProcess], metrics_directory: str, grace_seconds: float
    ) -> None:
        self.processes = processes
        self.metrics_directory = metrics_directory
        self.grace_seconds = grace_seconds
        self.signalled = 0

    def signal(self) -> None:
        """SIGTERM every worker, without waiting: the first time a graceful stop, the
        second a forced one (the API's own second Ctrl-C or SIGTERM)."""
        self.signalled += 1
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    def __call__(self) -> None:
        if not self.signalled:
            self.signal()
        deadline = time.monotonic() + self.grace_seconds + EMBEDDED_STOP_MARGIN_SECONDS
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
        metrics.remove_child_directory(self.metrics_directory)
        shutil.rmtree(self.metrics_directory, ignore_errors=True)


def start_embedded_workers(count: int, settings: Settings) -> EmbeddedWorkers:
    """Start `count` worker processes beside the API; returns what stops them.

    The children write their metrics to a private directory (prometheus-client's
    multiprocess mode, switched on through the environment they start with) that the
    API's `/metrics` merges into its own.
    """
    context = multiprocessing.get_context("spawn")
    metrics_directory = tempfile.mkdtemp(prefix="privq-worker-metrics-")
    processes: list[BaseProcess] = [
        context.Process(
            target=_embedded_main,
            args=(settings, os.getpid()),
            name=f"privq-worker-{i}",
            daemon=True,
        )
        for i in range(count)
    ]
    previous = os.environ.get(MULTIPROCESS_DIRECTORY_VARIABLE)
    os.environ[MULTIPROCESS_DIRECTORY_VARIABLE] = metrics_directory
    try:
        for process in processes:
            process.start()  # a spawned child copies the environment as it is now
    finally:
        if previous is None:
            os.environ.pop(MULTIPROCESS_DIRECTORY_VARIABLE, None)
        else:
            os.environ[MULTIPROCESS_DIRECTORY_VARIABLE] = previous
    metrics.add_child_directory(metrics_directory)
    logger.info("embedded workers started", extra={"count": count})
    return EmbeddedWorkers(processes, metrics_directory, settings.worker_stop_grace_seconds)
