"""Write-ahead spending, attacked: whatever a tenant or a crash does, every access to the
records stays paid for, and nothing reads the records outside the gate.

A stateful property test (hypothesis) drives tenants through measurements, AIM and
MWEM, cancels at random moments (queued, or from inside a selection or a noise draw),
worker kills (the process gone without a word, its lease left to expire), lost leases
(another worker takes the job mid-round) and retries. Spies watch:

- the privacy primitives that turn records into a release: OpenDP's noise
  (`noise.discrete_gaussian`, `noise.discrete_laplace`) and the exponential mechanism
  (`selection.exponential_mechanism`); each call's exact ρ is charged to the job the
  worker is running (ε²/8 for a selection, 1/(2σ²) or (1/b)²/2 for a draw);
- the record reader (`columns.ColumnCache.get`, `columns.true_marginal`): each call
  must happen inside an open gate of the job running;
- the gate itself (`RecordGate.open`).

After every step: the ρ the ledger keeps charged for each job (charges less refunds)
is at least the exact cost of every access the job made, and no read happened outside
the gate. On the code before the gate, the first cancel that lands inside a selection
breaks the first invariant: the round is refunded though it ran.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from fractions import Fraction
from typing import Any

import pytest
from conftest import ApiHelper, unique_name
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from sqlalchemy import select, update

from app.config import Settings
from app.db import Database, Job, LedgerEntry, utcnow
from app.privacy import noise, selection
from app.privacy.accounting import exact_rho, exact_rho_exponential
from app.services import columns, gate, jobs
from app.services.rho import UNITS_PER_RHO
from app.worker import Worker

SCHEMA = {
    "attributes": [
        {"name": "a", "type": "categorical", "values": ["x", "y"]},
        {"name": "b", "type": "categorical", "values": ["p", "q", "r"]},
        {"name": "c", "type": "categorical", "values": ["u", "v"]},
    ]
}
ROWS = [("x", "p", "u"), ("y", "q", "v"), ("x", "r", "v"), ("y", "p", "u"), ("x", "q", "u")]
CSV = "a,b,c\n" + "".join(",".join(row) + "\n" for row in ROWS * 8)
MARGINALS = [["a"], ["b"], ["a", "b"], ["b", "c"], ["a", "c"]]


class Killed(BaseException):
    """The worker process dies here: no handler of its own runs (see `Spies.kill`)."""


class Spies:
    """Who is running what, what each job accessed, and the event to fire at a moment."""

    def __init__(self) -> None:
        self.running: str | None = None  # the job the worker runs now
        self.accessed: dict[str, Fraction] = defaultdict(Fraction)
        self.open_gates: list[str] = []  # job ids whose gate is open now
        self.ungated: list[str] = []
        self.moments = 0  # primitive calls and gate openings seen in the running job
        self.fire_at: int | None = None
        self.event: str | None = None
        self.fired: list[tuple[str, str]] = []
        self.database: Database | None = None

    def moment(self) -> None:
        """One more moment of the running job: fire the planned event if it is this one."""
        self.moments += 1
        if self.event is None or self.moments != self.fire_at or self.running is None:
            return
        event, job_id, self.event = self.event, self.running, None
        self.fired.append((event, job_id))
        database = self.database
        if database is None:
            raise RuntimeError("spies not bound to a database")
        if event == "cancel":
            with database.unit_of_work() as session:
                jobs.cancel(session, jobs.get(session, job_id, for_update=True))
        elif event == "steal":
            # Another worker's claim: the lease is no longer ours.
            with database.unit_of_work() as session:
                session.execute(update(Job).where(Job.id == job_id).values(lease_owner="thief"))
        elif event == "kill":
            raise Killed()

    def charge(self, cost: Fraction) -> None:
        if self.running is None:
            self.ungated.append("a privacy primitive ran outside any job")
            return
        self.accessed[self.running] += cost

    def read(self, what: str) -> None:
        if self.running is None or self.running not in self.open_gates:
            self.ungated.append(f"{what} read outside the gate (job {self.running})")


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch, database: Database) -> Iterator[Spies]:
    spy = Spies()
    spy.database = database
    real_gaussian, real_laplace = noise.discrete_gaussian, noise.discrete_laplace
    real_exponential = selection.exponential_mechanism
    real_get, real_true_marginal = columns.ColumnCache.get, columns.true_marginal
    real_open, real_claim = gate.RecordGate.open, jobs.claim

    def gaussian(counts: Any, sigma: float) -> Any:
        spy.moment()
        spy.charge(exact_rho("gaussian", sigma, 1))
        return real_gaussian(counts, sigma)

    def laplace(counts: Any, scale: float) -> Any:
        spy.moment()
        spy.charge(exact_rho("laplace", scale, 1))
        return real_laplace(counts, scale)

    def exponential(scores: Any, epsilon: float, sensitivity: float) -> Any:
        spy.moment()
        spy.charge(exact_rho_exponential(epsilon))
        return real_exponential(scores, epsilon, sensitivity)

    def get(self: Any, *args: Any, **kwargs: Any) -> Any:
        spy.read("ColumnCache.get")
        return real_get(self, *args, **kwargs)

    def true_marginal(*args: Any, **kwargs: Any) -> Any:
        spy.read("true_marginal")
        return real_true_marginal(*args, **kwargs)

    @contextmanager
    def open_gate(self: gate.RecordGate, **kwargs: Any) -> Iterator[gate.RecordGate]:
        spy.moment()
        with real_open(self, **kwargs) as opened:
            spy.open_gates.append(self.job_id)
            try:
                yield opened
            finally:
                spy.open_gates.remove(self.job_id)

    def claim(*args: Any, **kwargs: Any) -> Any:
        job = real_claim(*args, **kwargs)
        spy.running = None if job is None else job.id
        spy.moments = 0
        return job

    monkeypatch.setattr(noise, "discrete_gaussian", gaussian)
    monkeypatch.setattr(noise, "discrete_laplace", laplace)
    monkeypatch.setattr(selection, "exponential_mechanism", exponential)
    monkeypatch.setattr(columns.ColumnCache, "get", get)
    monkeypatch.setattr(gate, "true_marginal", true_marginal)
    monkeypatch.setattr(gate.RecordGate, "open", open_gate)
    monkeypatch.setattr(jobs, "claim", claim)
    # A killed worker says nothing: its job keeps its lease until the lease expires. A job
    # given back at a safe point (a mechanism yielding its slot) still goes back.
    real_give_back = Worker._give_back

    def give_back(self: Worker, job: Job, *, attempt_spent: bool = True, **kwargs: Any) -> None:
        if not attempt_spent:
            real_give_back(self, job, attempt_spent=False, **kwargs)

    monkeypatch.setattr(Worker, "_give_back", give_back)
    yield spy


def net_charged(database: Database) -> dict[str, Fraction]:
    """Each job's ρ still charged (charges less refunds), exactly."""
    totals: dict[str, int] = defaultdict(int)
    with database.read_only() as session:
        for job_id, units in session.execute(
            select(LedgerEntry.job_id, LedgerEntry.rho_units).where(LedgerEntry.job_id.is_not(None))
        ):
            totals[job_id] += units
    return {job_id: Fraction(units, UNITS_PER_RHO) for job_id, units in totals.items()}


def expire_leases(database: Database) -> None:
    """Time passes: the lease of every running job (its worker dead) runs out."""
    with database.unit_of_work() as session:
        session.execute(
            update(Job)
            .where(Job.status == "running")
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def write_ahead_machine(
    client: TestClient, api: ApiHelper, database: Database, config: Settings, spies: Spies
) -> type[RuleBasedStateMachine]:
    dataset = api.upload_dataset(CSV, SCHEMA)

    class WriteAhead(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tenants: list[dict[str, Any]] = []
            for _ in range(2):
                tenant = api.create_tenant(unique_name("attacker"))
                api.grant(dataset["id"], tenant["id"], 5)
                self.tenants.append(tenant)
            self.jobs: list[str] = []
            self.worker = Worker(database, config, poll_seconds=0.0)

        def post(self, tenant: int, path: str, body: dict[str, Any]) -> None:
            response = client.post(
                f"/v1/datasets/{dataset['id']}/{path}",
                json=body,
                headers=self.tenants[tenant]["headers"],
            )
            if response.status_code == 202:
                self.jobs.append(response.json()["job_id"])
            else:  # out of budget at most: nothing else is refused here
                assert response.status_code == 409, response.text

        @rule(
            tenant=st.integers(0, 1),
            marginals=st.lists(st.sampled_from(MARGINALS), min_size=1, max_size=3),
            laplace=st.booleans(),
        )
        def measure(self, tenant: int, marginals: list[list[str]], laplace: bool) -> None:
            body: dict[str, Any] = {"marginals": marginals, "rho": 0.05}
            if laplace:
                body = {"marginals": marginals, "noise": "laplace", "scale": 20}
            self.post(tenant, "measurements", body)

        @rule(tenant=st.integers(0, 1), rounds=st.integers(1, 3))
        def mwem(self, tenant: int, rounds: int) -> None:
            body = {"rho": 0.05, "rounds": rounds, "workload": MARGINALS[2:]}
            self.post(tenant, "mechanisms/mwem", body)

        @rule(tenant=st.integers(0, 1))
        def aim(self, tenant: int) -> None:
            self.post(tenant, "mechanisms/aim", {"rho": 0.5, "workload": MARGINALS[2:]})

        @rule(index=st.integers(0, 50))
        def cancel_queued_or_running(self, index: int) -> None:
            if self.jobs:
                job_id = self.jobs[index % len(self.jobs)]
                response = client.post(
                    f"/v1/jobs/{job_id}/cancel", headers=self._owner_headers(job_id)
                )
                assert response.status_code in (200, 409), response.text

        @rule(
            event=st.sampled_from(["none", "cancel", "kill", "steal"]),
            moment=st.integers(1, 12),
        )
        def work(self, event: str, moment: int) -> None:
            """The worker runs one job; `event` strikes at its `moment`-th access or gate."""
            spies.event = None if event == "none" else event
            spies.fire_at = moment
            try:
                self.worker.run_once()
            except Killed:
                self.worker = Worker(database, config, poll_seconds=0.0)  # restarted
                expire_leases(database)
            finally:
                spies.event = None
                spies.running = None
            if spies.fired and spies.fired[-1][0] == "steal":
                expire_leases(database)  # the thief dies too: the job is claimable again

        def _owner_headers(self, job_id: str) -> dict[str, str]:
            with database.read_only() as session:
                owner = session.scalar(select(Job.tenant_id).where(Job.id == job_id))
            for tenant in self.tenants:
                if tenant["id"] == owner:
                    return dict(tenant["headers"])
            raise AssertionError("a job of neither tenant")

        @invariant()
        def every_access_is_paid_for(self) -> None:
            charged = net_charged(database)
            for job_id, cost in spies.accessed.items():
                kept = charged.get(job_id, Fraction(0))
                assert kept >= cost, (
                    f"job {job_id} keeps {float(kept)!r} ρ charged but its accesses to the "
                    f"records cost {float(cost)!r} (events: {spies.fired})"
                )

        @invariant()
        def nothing_reads_outside_the_gate(self) -> None:
            assert spies.ungated == []

        def teardown(self) -> None:
            # Drain the queue so the next example starts clean; the invariants still hold.
            spies.event = None
            expire_leases(database)
            self.worker.run_until_idle()
            self.every_access_is_paid_for()
            self.nothing_reads_outside_the_gate()
            with database.read_only() as session:
                left = session.scalars(select(Job.status).where(Job.id.in_(self.jobs))).all()
            assert set(left) <= {"succeeded", "failed", "cancelled"}

    return WriteAhead


def test_no_access_to_the_records_goes_unpaid(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, spies: Spies
) -> None:
    machine = write_ahead_machine(client, api, database, settings, spies)
    run_state_machine_as_test(
        machine,
        settings=settings_for_ci(),
    )
    assert spies.accessed, "no job accessed the records: the test exercised nothing"


def settings_for_ci() -> Any:
    return hypothesis_settings(
        # 8 programs of 10 steps: each runs real AIM, MWEM and measurement jobs on both
        # backends, so this one test is a minute of the suite's ten.
        max_examples=8,
        stateful_step_count=10,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
