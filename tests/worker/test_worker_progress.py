"""A mechanism job's progress through every stage: a slow final fit still reports every few
seconds (iteration, loss), with an ETA that GET /v1/jobs/{id} shows while the job runs."""

from __future__ import annotations

import json
import math
import time
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Job
from app.pgm.estimators import FitRun
from app.pgm.problem import FitProblem
from app.worker import Worker

SIZES = {"a": 3, "b": 4, "c": 5, "d": 3, "e": 2}
# A mirror-descent iteration made this much slower: 500 of them take 10 s or more.
SLOW_STEP_SECONDS = 0.02
MAX_GAP_SECONDS = 5.0


def chain_csv(rows: int = 2000, seed: int = 5) -> bytes:
    """A small seeded table (integer codes), each column depending on the one before."""
    rng = np.random.default_rng(seed)
    columns = [rng.integers(0, SIZES["a"], rows)]
    for name in list(SIZES)[1:]:
        previous = columns[-1]
        columns.append((previous + rng.integers(0, 2, rows)) % SIZES[name])
    table = np.stack(columns, axis=1)
    lines = [",".join(SIZES)] + [",".join(str(int(v)) for v in row) for row in table]
    return ("\n".join(lines) + "\n").encode()


class Watched(Worker):
    """A worker that records when each progress write happened, what it said, and what
    GET /v1/jobs/{id} answered right after it."""

    def __init__(self, *args: Any, client: TestClient, headers: dict[str, str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.client = client
        self.headers = headers
        self.writes: list[tuple[float, dict[str, Any], dict[str, Any]]] = []

    def progress(self, job: Job, update: dict[str, Any]) -> None:
        super().progress(job, update)
        seen = self.client.get(f"/v1/jobs/{job.id}", headers=self.headers).json()
        self.writes.append((time.monotonic(), dict(self._last_progress), seen))


def test_a_slow_final_fit_reports_at_most_five_seconds_apart_with_an_eta(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Worker(database, settings, poll_seconds=0.01).run_until_idle()  # earlier tests' jobs
    dataset = api.upload_dataset(chain_csv(), SIZES)
    tenant = api.create_tenant()
    api.grant(dataset["id"], tenant["id"], 1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/aim",
        json={"rho": 0.3},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]

    # The final fit is mirror descent (the worker's solver); between rounds, ADMM by size.
    # Each mirror-descent iteration is made slow (ADMM and the max-entropy step never
    # call this), so only the final fit is: seconds of it, with nothing else to report.
    real = FitProblem.loss_and_gradient

    def slow(self: FitProblem, x: np.ndarray) -> Any:
        time.sleep(SLOW_STEP_SECONDS)
        return real(self, x)

    monkeypatch.setattr(FitProblem, "loss_and_gradient", slow)
    # ... and it runs its plan's every iteration: stopping at its tolerance (the loss's
    # relative change below 1e-6, after a number of iterations that depends on the noise)
    # could end it before it has been slow for long.
    monkeypatch.setattr(FitRun, "stalled", lambda self: False)
    slow_settings = settings.model_copy(update={"fit_solver": "mirror_descent"})
    worker = Watched(
        database, slow_settings, poll_seconds=0.01, client=client, headers=tenant["headers"]
    )
    assert worker.run_until_idle() == 1
    final = client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"]).json()
    assert final["status"] == "succeeded", final
    assert final["eta_seconds"] is None  # not running any more

    stages = [progress["stage"] for _, progress, _ in worker.writes]
    assert {"round measured", "round fitted", "final fit", "round done"} <= set(stages)
    start = stages.index("final fit")
    end = stages.index("round done")
    span = worker.writes[start - 1 : end + 1]  # from the last round stored to the end
    times = [at for at, _, _ in span]
    assert times[-1] - times[0] >= 2 * MAX_GAP_SECONDS  # the final fit was slow ...
    gaps = [b - a for a, b in pairwise(times)]
    assert max(gaps) <= MAX_GAP_SECONDS, gaps  # ... and never silent for 5 s

    fitting = [(progress, seen) for _, progress, seen in span if progress["stage"] == "final fit"]
    iterations = [progress["iteration"] for progress, _ in fitting]
    assert len(fitting) >= 5 and iterations == sorted(iterations) and iterations[-1] > 100
    for progress, seen in fitting:
        assert progress["max_iterations"] == 500
        assert progress["loss"] is None or math.isfinite(progress["loss"])
        # an ETA while it runs, finite, and the API shows it (counted down since written)
        assert isinstance(progress["eta_seconds"], float) and progress["eta_seconds"] >= 0
        assert seen["status"] == "running" and isinstance(seen["eta_seconds"], float)
        assert 0.0 <= seen["eta_seconds"] <= progress["eta_seconds"]
    assert all(progress["loss"] is not None for progress, _ in fitting[1:])
    # every report is JSON without NaN or ∞
    for _, progress, seen in worker.writes:
        json.dumps(progress, allow_nan=False)
        json.dumps(seen, allow_nan=False)
    # the ETA falls as the final fit goes on
    etas = [progress["eta_seconds"] for progress, _ in fitting]
    assert etas[-1] < etas[0]
