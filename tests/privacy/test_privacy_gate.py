"""The mechanisms' side of write-ahead spending: every round passes the gate, at its exact
price, before it reads a true marginal; a lost round is spent, never redone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction

import numpy as np
import pytest
from privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

from app.privacy.mechanisms import MechanismOptions, Round, RoundAccess, run_aim, run_mwem
from app.privacy.mechanisms.engine import MechanismRun, MechanismStateError


class Gate:
    """Records each access and whether a read happens inside one."""

    def __init__(self, truth: Callable[[tuple[str, ...]], np.ndarray]) -> None:
        self.truth = truth
        self.accesses: list[RoundAccess] = []
        self.open = False
        self.reads_outside = 0

    @contextmanager
    def __call__(self, access: RoundAccess) -> Iterator[None]:
        self.accesses.append(access)
        self.open = True
        try:
            yield
        finally:
            self.open = False

    def read(self, attrs: tuple[str, ...]) -> np.ndarray:
        if not self.open:
            self.reads_outside += 1
        return self.truth(attrs)


@pytest.mark.parametrize("mechanism", [run_mwem, run_aim])
def test_every_round_passes_the_gate_at_its_exact_price_before_it_reads(mechanism) -> None:  # type: ignore[no-untyped-def]
    gate = Gate(synthetic(3))
    options = MechanismOptions(rounds=4 if mechanism is run_mwem else None, **FAST)
    result = mechanism(DOMAIN, gate.read, 0.5, ALL_PAIRS, options=options, gate=gate)
    assert gate.reads_outside == 0
    assert [a.index for a in gate.accesses] == [r.index for r in result.rounds]
    assert [a.exact_cost for a in gate.accesses] == [r.exact_cost for r in result.rounds]
    assert [(a.kind, a.sigma, a.epsilon) for a in gate.accesses] == [
        (r.kind, r.sigma, r.epsilon) for r in result.rounds
    ]
    # within the charge up to the float rounding the service's SAFETY margin absorbs
    assert sum((a.exact_cost for a in gate.accesses), Fraction(0)) <= Fraction(0.5) * (
        1 + Fraction(1, 10**12)
    )


def test_a_refusal_at_the_gate_stops_the_run_before_it_reads() -> None:
    class Refused(Exception):
        pass

    truth = synthetic(4)
    reads: list[tuple[str, ...]] = []

    def read(attrs: tuple[str, ...]) -> np.ndarray:
        reads.append(attrs)
        return truth(attrs)

    @contextmanager
    def refusing(access: RoundAccess) -> Iterator[None]:
        raise Refused()
        yield

    with pytest.raises(Refused):
        run_mwem(DOMAIN, read, 0.5, ALL_PAIRS, options=MechanismOptions(rounds=3), gate=refusing)
    assert reads == []


def test_a_lost_round_is_spent_and_takes_its_slot() -> None:
    truth = synthetic(5)
    options = MechanismOptions(rounds=4, **FAST)
    stored: list[Round] = []
    run_mwem(DOMAIN, truth, 0.4, ALL_PAIRS, options=options, on_round=stored.append)
    # Rounds 0 and 1 stored; round 2 passed the gate and was lost: its ρ is spent.
    lost = stored[2].cost
    gate = Gate(truth)
    result = run_mwem(
        DOMAIN,
        gate.read,
        0.4,
        ALL_PAIRS,
        options=options,
        completed_rounds=stored[:2],
        lost_rounds=[lost],
        gate=gate,
    )
    assert [r.index for r in result.rounds] == [0, 1, 2]  # one new round: the last slot
    assert len(gate.accesses) == 1 and gate.accesses[0].index == 2
    assert result.rho_used == pytest.approx(0.4, rel=1e-9)  # lost round included
    assert result.rounds[:2] == stored[:2]


def test_selecting_or_measuring_outside_an_access_is_refused() -> None:
    run = MechanismRun("t", DOMAIN, synthetic(6), 0.1, {("a", "b"): 1.0})
    with pytest.raises(MechanismStateError):
        run.select([("a", "b")], {("a", "b"): 1.0}, 10.0, 0.1, 0.0)
    with pytest.raises(MechanismStateError):
        run.measure("measure", ("a",), 10.0, 0.0)
    with run.access("measure", 10.0, 0.0), pytest.raises(MechanismStateError):
        run.measure("measure", ("a",), 20.0, 0.0)  # not the price it paid


def test_an_aim_run_whose_final_round_was_lost_ends_without_another_round() -> None:
    truth = synthetic(7)
    options = MechanismOptions(**FAST)
    stored: list[Round] = []
    run_aim(DOMAIN, truth, 0.3, ALL_PAIRS, options=options, on_round=stored.append)
    assert stored[-1].final
    gate = Gate(truth)
    result = run_aim(
        DOMAIN,
        gate.read,
        0.3,
        ALL_PAIRS,
        options=options,
        completed_rounds=stored[:-1],
        lost_rounds=[stored[-1].cost],
        gate=gate,
    )
    assert gate.accesses == []  # the lost final round spent the rest: nothing more to buy
    assert len(result.rounds) == len(stored) - 1
    assert result.rho_used == pytest.approx(0.3, rel=1e-9)
