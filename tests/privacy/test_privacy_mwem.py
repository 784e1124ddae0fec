"""MWEM+PGM: accounting, resume after a crash, size filter, and Theorem 4 bounds."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

from app.pgm.junction_tree import model_cells
from app.privacy import noise, selection
from app.privacy.accounting import rho_exponential, rho_gaussian
from app.privacy.mechanisms import MechanismOptions, Round, error_bound, run_mwem
from app.privacy.mechanisms.workload import covered_by


def test_round_parameters_split_rho_per_round() -> None:
    rho, rounds = 0.8, 4
    result = run_mwem(
        DOMAIN, synthetic(0), rho, ALL_PAIRS, options=MechanismOptions(rounds=rounds, **FAST)
    )
    assert len(result.rounds) == rounds
    for r in result.rounds:
        assert r.kind == "select+measure" and r.attributes in ALL_PAIRS
        assert rho_gaussian(r.sigma) == pytest.approx(0.9 * rho / rounds, rel=1e-9)
        assert rho_exponential(r.epsilon) == pytest.approx(0.1 * rho / rounds, rel=1e-9)
        assert (
            r.selection is not None and r.selection.sensitivity == 1.0 and r.selection.bias == 0.0
        )
    assert result.rounds[-1].final


@pytest.mark.parametrize("case", range(10))
def test_accounting_never_exceeds_charge(case: int) -> None:
    rng = np.random.default_rng(200 + case)
    rho = float(np.exp(rng.uniform(np.log(0.005), np.log(5.0))))
    size = int(rng.integers(1, len(ALL_PAIRS) + 1))
    workload = [ALL_PAIRS[i] for i in rng.choice(len(ALL_PAIRS), size=size, replace=False)]
    cap = int(rng.choice([60, 200, 10**7]))
    options = MechanismOptions(rounds=int(rng.integers(1, 8)), max_model_cells=cap, **FAST)
    result = run_mwem(DOMAIN, synthetic(case), rho, workload, options=options)
    total = math.fsum(r.rho for r in result.rounds)
    assert total <= rho * (1 + 1e-12)
    assert total == pytest.approx(rho, rel=1e-9)
    opendp_total = math.fsum(
        noise.privacy_map("gaussian", r.sigma) + selection.selection_rho(r.epsilon, 1.0)
        for r in result.rounds
    )
    assert opendp_total <= rho * (1 + 1e-9)
    measured: list[tuple[str, ...]] = []
    for r in result.rounds:
        measured.append(r.attributes)
        assert model_cells(DOMAIN, measured) <= cap
    assert result.fit.model_cells <= cap


@pytest.mark.parametrize("crash_at", [0, 3])
def test_resume_after_crash(monkeypatch: pytest.MonkeyPatch, crash_at: int) -> None:
    draws: list[int] = []
    real_noise = noise.discrete_gaussian

    def counting_noise(counts: np.ndarray, sigma: float) -> np.ndarray:
        draws.append(int(np.asarray(counts).size))
        return real_noise(counts, sigma)

    monkeypatch.setattr(noise, "discrete_gaussian", counting_noise)
    rho, truth = 0.5, synthetic(7)
    options = MechanismOptions(rounds=6, **FAST)
    stored: list[dict] = []

    class Crash(RuntimeError):
        pass

    def on_round(r: Round) -> None:
        stored.append(json.loads(json.dumps(r.to_dict())))
        if r.index == crash_at:
            raise Crash()

    with pytest.raises(Crash):
        run_mwem(DOMAIN, truth, rho, ALL_PAIRS, options=options, on_round=on_round)
    assert len(draws) == crash_at + 1
    result = run_mwem(DOMAIN, truth, rho, ALL_PAIRS, options=options, completed_rounds=stored)
    assert len(draws) == 6  # every round's noise drawn exactly once across both runs
    assert len(result.rounds) == 6
    for i, saved in enumerate(stored):
        assert np.array_equal(result.rounds[i].values, np.asarray(saved["values"]))
    total = math.fsum(r.rho for r in result.rounds)
    assert total <= rho * (1 + 1e-12) and total == pytest.approx(rho, rel=1e-9)


def test_size_schedule_limits_early_rounds() -> None:
    # cap 40, T = 2: round 1 admits models up to 20 cells. (a, b) makes a 6+4+5+3 = 18-cell
    # model, (c, d) a 2+3+20+3 = 28-cell one, so round 1 must choose (a, b); round 2 may
    # add (c, d) (6+20+3 = 29 ≤ 40).
    workload = [("c", "d"), ("a", "b")]
    for seed in range(5):
        result = run_mwem(
            DOMAIN,
            synthetic(seed),
            0.5,
            workload,
            options=MechanismOptions(rounds=2, max_model_cells=40, **FAST),
        )
        assert result.rounds[0].attributes == ("a", "b")
        assert model_cells(DOMAIN, [r.attributes for r in result.rounds]) <= 40


def test_workload_that_cannot_fit_is_refused_before_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_noise(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("noise drawn")

    monkeypatch.setattr(noise, "discrete_gaussian", no_noise)
    with pytest.raises(ValueError):
        run_mwem(
            DOMAIN, synthetic(0), 0.5, [("c", "d")], options=MechanismOptions(max_model_cells=25)
        )


def test_progress_is_reported() -> None:
    seen = []
    run_mwem(
        DOMAIN,
        synthetic(8),
        0.3,
        ALL_PAIRS[:4],
        options=MechanismOptions(rounds=3, **FAST),
        on_progress=seen.append,
    )
    measured = [p for p in seen if p.stage == "measured"]
    assert [p.round_index for p in measured] == [0, 1, 2]
    assert measured[-1].rho_used == pytest.approx(0.3, rel=1e-9)
    assert seen[-1].stage == "done" and seen[-1].rounds_done == 3


def test_theorem4_bounds_hold_empirically() -> None:
    """With T = 3 rounds over 7 marginals most stay unmeasured: Theorem 4 must cover them."""
    workload = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "e"), ("d", "e"), ("b", "e"), ("a", "d")]
    hits: dict[str, list[bool]] = {"theorem 2": [], "theorem 4": []}
    for seed in range(50):
        truth = synthetic(2_000 + seed)
        result = run_mwem(DOMAIN, truth, 1.0, workload, options=MechanismOptions(rounds=3, **FAST))
        measured = [r.attributes for r in result.rounds]
        for r in workload:
            answer = result.model.marginal(r).ravel()
            found = error_bound(DOMAIN, r, answer, result.measurements, result.unmeasured_bounds)
            assert found is not None
            assert found.theorem == ("theorem 2" if covered_by(r, measured) else "theorem 4")
            hits[found.theorem].append(float(np.abs(answer - truth(r)).sum()) <= found.bound)
    assert len(hits["theorem 4"]) >= 100
    for theorem, h in hits.items():
        assert np.mean(h) >= 0.9, theorem


def test_a_stop_during_the_final_fit_leaves_every_round_stored_and_draws_nothing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`MechanismOptions.checkpoint` runs inside every fit, the final one included: a worker
    asked to stop there leaves with every round stored, and the resumed run only fits."""
    draws: list[int] = []
    real_noise = noise.discrete_gaussian

    def counting_noise(counts: np.ndarray, sigma: float) -> np.ndarray:
        draws.append(int(np.asarray(counts).size))
        return real_noise(counts, sigma)

    monkeypatch.setattr(noise, "discrete_gaussian", counting_noise)

    class Stop(BaseException):
        pass

    stored: list[dict] = []
    final_stored = False

    def on_round(r: Round) -> None:
        nonlocal final_stored
        stored.append(json.loads(json.dumps(r.to_dict())))
        final_stored = r.final

    calls = {"after_final": 0}

    def checkpoint() -> None:
        if final_stored:
            calls["after_final"] += 1
            raise Stop()

    rho, truth, rounds = 0.5, synthetic(3), 4
    stopping = MechanismOptions(rounds=rounds, checkpoint=checkpoint, **FAST)
    with pytest.raises(Stop):
        run_mwem(DOMAIN, truth, rho, ALL_PAIRS, options=stopping, on_round=on_round)
    assert calls["after_final"] == 1  # raised from the final fit's first iteration
    assert len(stored) == rounds and stored[-1]["final"] and len(draws) == rounds

    resumed = run_mwem(
        DOMAIN,
        truth,
        rho,
        ALL_PAIRS,
        options=MechanismOptions(rounds=rounds, **FAST),
        completed_rounds=stored,
    )
    assert len(draws) == rounds  # nothing drawn again
    assert [r.index for r in resumed.rounds] == list(range(rounds))
    assert resumed.model is not None
