"""SIGTERM to a real `privq worker`: the job stops at its next safe point and goes back to
the queue at once, with its attempt taken back; another worker finishes it. Nothing
drawn is lost or drawn again, and the ledger is exact.

Three moments: during a fit (abandoned and redone: it spends nothing), during AIM
(between rounds: the stored rounds stay and are replayed), and during a measurement's
draw (the worker finishes the draw and stores it before it stops). In-process tests
cover the same safe points without processes, and the final progress of a fit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from typing import Any

from conftest import ADMIN_HEADERS, adult_domain, adult_slice, job_row
from sqlalchemy import select

from app.db import Database, Job, LedgerEntry, MeasurementRecord, ModelVersion, RecordAccess
from app.services import gate, jobs
from app.services.refunds import units_up
from app.worker import Worker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# How long a stopped worker may take to exit on a loaded machine (it stops at a safe
# point well before its grace, then disposes its connections).
EXIT_SECONDS = 30


def start_worker(database_url: str, **settings: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PRIVQ_DATABASE_URL": database_url,
        "PRIVQ_WORKER_POLL_SECONDS": "0.1",
        "PRIVQ_ADMIN_KEY": "unused-admin-key-for-the-worker-process",
        "PRIVQ_LOG_LEVEL": "INFO",
        **{f"PRIVQ_{name.upper()}": value for name, value in settings.items()},
    }
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_for(predicate: Any, timeout: float, what: str, poll: float = 0.05) -> None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def terminate(process: subprocess.Popen[bytes]) -> str:
    """SIGTERM once; the worker must exit by itself, 0, within EXIT_SECONDS. Its stderr."""
    process.send_signal(signal.SIGTERM)
    try:
        _out, err = process.communicate(timeout=EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        _out, err = process.communicate(timeout=10)
        tail = err.decode(errors="replace")[-4000:]
        raise AssertionError(
            f"the worker did not stop at a safe point within {EXIT_SECONDS} s; its log ends:\n"
            f"{tail}"
        ) from None
    log = err.decode(errors="replace")
    assert process.returncode == 0, log
    return log


def kill(process: subprocess.Popen[bytes] | None) -> str:
    """Kill the worker if it still runs; the end of its stderr."""
    if process is None or process.poll() is not None:
        return ""
    process.kill()
    _out, err = process.communicate(timeout=10)
    return err.decode(errors="replace")[-4000:]


def stored(database: Database, job_id: str) -> list[tuple[int, bytes, int | None]]:
    with database.read_only() as session:
        return [
            (r.position, r.values, r.access_id)
            for r in session.scalars(
                select(MeasurementRecord)
                .where(MeasurementRecord.job_id == job_id)
                .order_by(MeasurementRecord.position)
            )
        ]


def accesses(database: Database, job_id: str) -> list[RecordAccess]:
    with database.read_only() as session:
        rows = session.scalars(
            select(RecordAccess)
            .where(RecordAccess.job_id == job_id)
            .order_by(RecordAccess.sequence)
        ).all()
        session.expunge_all()
        return list(rows)


def lost(database: Database, job_id: str) -> list[RecordAccess]:
    with database.read_only() as session:
        return gate.lost_accesses(session, job_id)


def ledger_units(database: Database, job_id: str) -> list[tuple[str, int]]:
    with database.read_only() as session:
        return [
            (e.kind, e.rho_units)
            for e in session.scalars(
                select(LedgerEntry).where(LedgerEntry.job_id == job_id).order_by(LedgerEntry.id)
            )
        ]


def assert_given_back(database: Database, job_id: str) -> None:
    """Queued again at once (no lease left to expire), its attempt taken back."""
    job = job_row(database, job_id)
    assert job.status == "queued"
    assert job.lease_owner is None and job.lease_expires_at is None
    assert job.attempts == 0
    assert job.error is None
    assert (job.progress or {})["stage"] == "requeued"


def run_to_the_end(database: Database, database_url: str, job_id: str, **settings: str) -> Job:
    second = start_worker(database_url, **settings)
    try:
        wait_for(
            lambda: job_row(database, job_id).status not in ("queued", "running"),
            240,
            "the second worker to finish the job",
            poll=0.2,
        )
    except AssertionError as timed_out:
        # The wait's own failure is the one to report (with the worker's log), not the stop's.
        raise AssertionError(f"{timed_out}; the worker's log ends:\n{kill(second)}") from None
    terminate(second)
    job = job_row(database, job_id)
    assert job.status == "succeeded", job.error
    assert job.attempts == 1  # the stopped worker's claim was taken back
    return job


def measure(client, tenant: dict[str, Any], dataset_id: str, marginals: list[list[str]]) -> str:
    response = client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        json={"marginals": marginals, "rho": 0.2},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def test_sigterm_during_a_fit_abandons_it_and_gives_the_job_back(
    client, api, database: Database, database_url: str
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(adult_slice(2000), adult_domain())
    api.grant(dataset["id"], tenant["id"], 1)
    # Three noisy marginals in a cycle (one clique of 134k cells), no tolerance and a
    # large iteration cap: a fit that would run for a long time.
    cycle = [
        ["age", "hours-per-week"],
        ["age", "education-num"],
        ["hours-per-week", "education-num"],
    ]
    job_id = measure(client, tenant, dataset["id"], cycle)
    first = start_worker(
        database_url,
        fit_solver="mirror_descent",
        fit_tolerance="0",
        fit_max_iterations="10000000",
    )
    try:
        wait_for(
            lambda: (job_row(database, job_id).progress or {}).get("iteration", 0) >= 1,
            120,
            "the fit to be under way",
        )
        before = stored(database, job_id)
        log = terminate(first)
    finally:
        kill(first)
    assert "stop requested" in log and "job given back" in log
    assert_given_back(database, job_id)
    with database.read_only() as session:
        versions = session.scalars(
            select(ModelVersion.version).where(ModelVersion.dataset_id == dataset["id"])
        ).all()
    assert versions == []  # the abandoned fit stored nothing

    # The second worker's fit is short: what is checked is that it draws nothing again.
    job = run_to_the_end(database, database_url, job_id, fit_max_iterations="40")
    assert stored(database, job_id) == before  # the noise was drawn once
    assert len(accesses(database, job_id)) == 1
    charge = 200_000_000_000
    assert ledger_units(database, job_id) == [("charge", charge)]  # all of it used, once
    assert job.model_version is not None


def test_sigterm_during_aim_stops_between_rounds_and_nothing_is_drawn_twice(
    client, api, database: Database, database_url: str
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(adult_slice(2000), adult_domain())
    api.grant(dataset["id"], tenant["id"], 1)
    accepted = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/aim",
        json={
            "rho": 0.5,
            "workload": [["sex", "race"], ["age", "sex"], ["workclass", "sex"], ["race"]],
        },
        headers=tenant["headers"],
    )
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["job_id"]

    # A rolling redeploy: more stops than MAX_ATTEMPTS, each after one more round.
    before: list[tuple[int, bytes, int | None]] = []
    for restart in range(jobs.MAX_ATTEMPTS + 1):
        done = len(before)
        worker = start_worker(database_url)
        try:
            # A new round, or the end: a run stopped during its final fit resumes with
            # nothing left to draw, only the fit.
            wait_for(
                lambda done=done: (
                    len(stored(database, job_id)) > done
                    or job_row(database, job_id).status not in ("queued", "running")
                ),
                180,
                f"a round of AIM after restart {restart}",
            )
            log = terminate(worker)
        finally:
            kill(worker)
        if "job given back" not in log:
            # The SIGTERM came after the run's last step (a small table's rounds and final
            # fit can take well under the test's polling, or this worker only had the
            # final fit left to run): the job ended in this worker.
            assert job_row(database, job_id).status == "succeeded", log
            break
        assert_given_back(database, job_id)
        assert lost(database, job_id) == []  # it stopped with no round in flight
        now = stored(database, job_id)
        assert now[: len(before)] == before  # nothing stored was drawn again
        before = now
    else:
        run_to_the_end(database, database_url, job_id)
    after = stored(database, job_id)
    assert after[: len(before)] == before  # the stored rounds were replayed, not redrawn
    assert [position for position, _, _ in after] == list(range(len(after)))
    # One access a round, each with its stored output: none drawn twice, none lost.
    rows = accesses(database, job_id)
    assert len(rows) == len(after)
    assert sorted(a.id for a in rows) == sorted(access for _, _, access in after)
    assert lost(database, job_id) == []
    # The ledger: one charge, as for a run nobody stopped, which covers every access.
    charge = 500_000_000_000
    assert ledger_units(database, job_id) == [("charge", charge)]
    assert units_up(sum((Fraction(a.exact_rho) for a in rows), Fraction(0))) <= charge


def test_sigterm_during_a_measurements_draw_stores_it_before_stopping(
    client, api, database: Database, database_url: str
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(adult_slice(2000), adult_domain())
    api.grant(dataset["id"], tenant["id"], 1)
    # 85 × 99 × 9 cells: OpenDP's exact sampler takes seconds over them.
    job_id = measure(client, tenant, dataset["id"], [["age", "hours-per-week", "workclass"]])
    first = start_worker(database_url)
    try:
        wait_for(lambda: len(accesses(database, job_id)) == 1, 120, "the gate", poll=0.01)
        drawing = not stored(database, job_id)
        log = terminate(first)
    finally:
        kill(first)
    assert drawing, "the draw ended before the signal: make the marginal larger"
    assert "job given back" in log
    assert_given_back(database, job_id)
    before = stored(database, job_id)
    assert len(before) == 1  # the draw in flight was finished and stored
    assert lost(database, job_id) == []

    run_to_the_end(database, database_url, job_id)
    assert stored(database, job_id) == before
    assert len(accesses(database, job_id)) == 1
    assert ledger_units(database, job_id) == [("charge", 200_000_000_000)]


# -- in process: the same safe points, and the final progress -----------------------------


class StoppingWorker(Worker):
    """A worker asked to stop (as SIGTERM would) when it reports `stage`."""

    def __init__(self, *args: Any, stop_when: str, after_rounds: int = 0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.stop_when = stop_when
        self.after_rounds = after_rounds

    def progress(self, job: Job, update: dict[str, Any]) -> None:
        stage = str(update.get("stage", ""))
        if stage.startswith(self.stop_when) and int(update.get("rounds_done", 0)) >= (
            self.after_rounds
        ):
            self.request_stop()
        super().progress(job, update)


def test_a_stop_between_mwem_rounds_keeps_the_rounds_and_spends_no_attempt(
    client, api, database: Database, settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/mwem",
        json={"rho": 0.4, "workload": [["sex", "age"], ["sex"], ["age"]], "rounds": 5},
        headers=tenant["headers"],
    ).json()["job_id"]
    stopping = StoppingWorker(database, settings, stop_when="round measured", after_rounds=2)
    assert stopping.run_once()
    assert not stopping.run_once()  # a stopped worker claims nothing more
    assert_given_back(database, job_id)
    before = stored(database, job_id)
    assert len(before) == 2 and lost(database, job_id) == []

    assert Worker(database, settings).run_until_idle() == 1
    job = client.get(f"/v1/jobs/{job_id}", headers=ADMIN_HEADERS).json()
    assert job["status"] == "succeeded" and job["attempts"] == 1
    after = stored(database, job_id)
    assert after[:2] == before and len(after) == len(accesses(database, job_id))


def test_a_job_s_final_progress_is_the_fit_s_last_iteration(
    client, api, database: Database, settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    job_id = measure(client, tenant, dataset["id"], [["sex", "age"], ["sex"]])
    assert Worker(database, settings).run_until_idle() == 1
    job = client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"]).json()
    assert job["status"] == "succeeded"
    with database.read_only() as session:
        version = session.get(ModelVersion, (dataset["id"], job["model_version"]))
        assert version is not None
        iterations = version.iterations
    assert iterations > 1
    assert job["progress"]["iteration"] == iterations
    assert job["progress"]["stage"] == "done"
