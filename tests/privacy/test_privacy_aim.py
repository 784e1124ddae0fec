"""AIM: accounting, schedule, resume after a crash, and the §5 error bounds."""

from __future__ import annotations

import json
import math
from itertools import combinations, pairwise

import numpy as np
import pytest
from privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

from app.pgm.junction_tree import model_cells
from app.privacy import noise, selection
from app.privacy.mechanisms import (
    MechanismOptions,
    Round,
    RoundsMismatch,
    error_bound,
    run_aim,
)
from app.privacy.mechanisms.aim import aim_schedule
from app.privacy.mechanisms.bounds import combined_estimate, theorem2_bound
from app.privacy.mechanisms.budget import round_cost
from app.privacy.mechanisms.workload import candidate_weights, covered_by, normalise_workload


def test_candidate_weights_follow_the_paper() -> None:
    workload = normalise_workload(DOMAIN, [("a", "b"), (("b", "c"), 2.0), ("c", "b")])
    assert workload == {("a", "b"): 1.0, ("b", "c"): 3.0}
    weights = candidate_weights(DOMAIN, workload)
    # w_r = Σ_s c_s |r ∩ s|
    assert weights == {
        ("a",): 1.0,
        ("b",): 4.0,
        ("c",): 3.0,
        ("a", "b"): 1.0 * 2 + 3.0 * 1,
        ("b", "c"): 1.0 * 1 + 3.0 * 2,
    }


def test_schedule_initialisation_and_annealing() -> None:
    rho = 0.3
    truth = synthetic(1)
    # the paper's schedule (privq's default split is pinned in test_privacy_aim_schedule)
    paper = MechanismOptions(
        init_share=None,
        noise_filter=None,
        rounds_per_attribute=16,
        anneal_factor=2.0,
        **FAST,  # type: ignore[arg-type]
    )
    result = run_aim(DOMAIN, truth, rho, ALL_PAIRS[:6], options=paper)
    rounds_t, sigma0, epsilon0 = aim_schedule(DOMAIN, rho, paper)
    assert rounds_t == 16 * 5
    assert sigma0 == pytest.approx(math.sqrt(rounds_t / (2 * 0.9 * rho)), rel=1e-12)
    assert epsilon0 == pytest.approx(math.sqrt(8 * 0.1 * rho / rounds_t), rel=1e-12)
    rounds = result.rounds
    # one-way initialisation of every attribute in the workload's closure, with σ₀
    assert [r.attributes for r in rounds[:5]] == [(a,) for a in DOMAIN.attributes]
    assert all(r.kind == "measure" and r.sigma == sigma0 and r.epsilon == 0 for r in rounds[:5])
    selects = rounds[5:]
    assert selects and all(r.kind == "select+measure" for r in selects)
    assert selects[0].epsilon == epsilon0
    # annealing: σ only changes by halving on an annealed round, except the final one
    for prev, cur in pairwise(selects):
        if cur.final:
            continue
        assert cur.sigma == (prev.sigma / 2 if cur.annealed else prev.sigma)
        assert cur.epsilon == (prev.epsilon * 2 if cur.annealed else prev.epsilon)
    assert selects[-1].final and not any(r.final for r in rounds[:-1])
    assert sum(r.rho for r in rounds) == pytest.approx(rho, rel=1e-12)


@pytest.mark.parametrize("case", range(10))
def test_accounting_never_exceeds_charge(case: int) -> None:
    rng = np.random.default_rng(100 + case)
    rho = float(np.exp(rng.uniform(np.log(0.005), np.log(5.0))))
    pairs = [
        ALL_PAIRS[i] for i in rng.choice(len(ALL_PAIRS), size=rng.integers(1, 7), replace=False)
    ]
    triples = list(combinations(DOMAIN.attributes, 3))
    workload = [(p, float(rng.uniform(0.5, 3.0))) for p in pairs]
    if rng.random() < 0.5:
        workload.append((triples[int(rng.integers(len(triples)))], 1.0))
    cap = int(rng.choice([60, 150, 10**7]))
    options = MechanismOptions(rounds=int(rng.integers(6, 16)), max_model_cells=cap, **FAST)
    result = run_aim(DOMAIN, synthetic(case), rho, workload, options=options)

    costs = [r.rho for r in result.rounds]
    assert all(
        c == round_cost(r.sigma, r.epsilon) for c, r in zip(costs, result.rounds, strict=True)
    )
    assert math.fsum(costs) <= rho * (1 + 1e-12)
    assert math.fsum(costs) == pytest.approx(rho, rel=1e-9)  # spends exactly its charge
    assert result.rho_used == pytest.approx(math.fsum(costs), rel=1e-15)
    # OpenDP's own privacy maps agree with the ledger
    opendp_total = 0.0
    for r in result.rounds:
        opendp_total += noise.privacy_map("gaussian", r.sigma)
        if r.selection is not None:
            opendp_total += selection.selection_rho(r.epsilon, r.selection.sensitivity)
    assert opendp_total <= rho * (1 + 1e-9)
    # the model respects the cap, and so did every chosen marginal at its time
    assert result.fit.model_cells <= cap
    measured: list[tuple[str, ...]] = []
    for r in result.rounds:
        measured.append(r.attributes)
        assert model_cells(DOMAIN, measured) <= cap
    assert len(result.measurements) == len(result.rounds)


@pytest.mark.parametrize("crash_at", [2, 7, -1])
def test_resume_after_crash_draws_no_noise_twice(
    monkeypatch: pytest.MonkeyPatch, crash_at: int
) -> None:
    draws: list[np.ndarray] = []
    real_noise = noise.discrete_gaussian

    def counting_noise(counts: np.ndarray, sigma: float) -> np.ndarray:
        out = real_noise(counts, sigma)
        draws.append(out.copy())
        return out

    monkeypatch.setattr(noise, "discrete_gaussian", counting_noise)
    rho, workload, truth = 0.4, ALL_PAIRS[:5], synthetic(3)
    options = MechanismOptions(rounds=10, **FAST)
    stored: list[dict] = []

    class Crash(RuntimeError):
        pass

    if crash_at == -1:  # crash after the final round was committed

        def on_round(r: Round) -> None:
            stored.append(json.loads(json.dumps(r.to_dict())))
            if r.final:
                raise Crash()
    else:

        def on_round(r: Round) -> None:
            stored.append(json.loads(json.dumps(r.to_dict())))  # committed
            if r.index == crash_at:
                raise Crash()

    with pytest.raises(Crash):
        run_aim(DOMAIN, truth, rho, workload, options=options, on_round=on_round)
    first_draws = len(draws)
    assert first_draws == len(stored)

    resumed_rounds: list[Round] = []
    result = run_aim(
        DOMAIN,
        truth,
        rho,
        workload,
        options=options,
        completed_rounds=list(stored),
        on_round=resumed_rounds.append,
    )
    new_draws = len(draws) - first_draws
    assert new_draws == len(result.rounds) - len(stored) == len(resumed_rounds)
    for i, saved in enumerate(stored):
        assert np.array_equal(result.rounds[i].values, np.asarray(saved["values"]))
    assert [r.index for r in result.rounds] == list(range(len(result.rounds)))
    total = math.fsum(r.rho for r in result.rounds)
    assert total <= rho * (1 + 1e-12)
    assert total == pytest.approx(rho, rel=1e-9)
    assert result.rounds[-1].final


def test_resume_refuses_foreign_rounds() -> None:
    truth = synthetic(4)
    stored: list[Round] = []
    run_aim(
        DOMAIN,
        truth,
        0.2,
        ALL_PAIRS[:3],
        options=MechanismOptions(rounds=6, **FAST),
        on_round=stored.append,
    )
    with pytest.raises(RoundsMismatch):  # another budget → another σ₀
        run_aim(
            DOMAIN,
            truth,
            0.3,
            ALL_PAIRS[:3],
            options=MechanismOptions(rounds=6, **FAST),
            completed_rounds=stored[:4],
        )
    tampered = stored[0].to_dict() | {"rho": stored[0].rho / 2}
    with pytest.raises(RoundsMismatch):
        run_aim(
            DOMAIN,
            truth,
            0.2,
            ALL_PAIRS[:3],
            options=MechanismOptions(rounds=6, **FAST),
            completed_rounds=[tampered],
        )


def test_too_few_rounds_refused_before_any_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_noise(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("noise drawn")

    monkeypatch.setattr(noise, "discrete_gaussian", no_noise)
    with pytest.raises(ValueError):
        run_aim(DOMAIN, synthetic(0), 0.2, ALL_PAIRS, options=MechanismOptions(rounds=5))


def test_round_record_round_trips_through_json() -> None:
    stored: list[Round] = []
    run_aim(
        DOMAIN,
        synthetic(5),
        0.2,
        ALL_PAIRS[:3],
        options=MechanismOptions(rounds=6, **FAST),
        on_round=stored.append,
    )
    for r in stored:
        back = Round.from_dict(json.loads(json.dumps(r.to_dict())))
        assert back.to_dict() == r.to_dict()
        assert back.values.dtype == np.int64


def test_never_uses_numpy_random(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("numpy.random used on a released path")

    truth = synthetic(6)
    for name in ("default_rng", "normal", "laplace", "choice", "random", "gumbel"):
        monkeypatch.setattr(np.random, name, forbidden)
    result = run_aim(DOMAIN, truth, 0.2, ALL_PAIRS[:3], options=MechanismOptions(rounds=6, **FAST))
    assert result.rounds


def test_theorem2_combines_measurements_by_inverse_variance() -> None:
    from app.pgm.measurement import Measurement

    ab = np.arange(6, dtype=float).reshape(2, 3)
    m1 = Measurement(("a", "b"), ab.ravel(), "gaussian", 2.0)
    m2 = Measurement(("b",), np.array([10.0, 0.0, 5.0]), "gaussian", 1.0)
    estimate, sigma_bar = combined_estimate(DOMAIN, ("b",), [m1, m2])  # type: ignore[misc]
    # projection of (a,b) onto b sums 2 cells: variance 2·4 = 8; direct b: variance 1
    w1, w2 = 1 / 8, 1 / 1
    assert np.allclose(estimate, (w1 * ab.sum(axis=0) + w2 * np.array([10, 0, 5])) / (w1 + w2))
    assert sigma_bar == pytest.approx(math.sqrt(1 / (w1 + w2)))
    # attribute order of the request is respected
    est_ba, _ = combined_estimate(DOMAIN, ("b", "a"), [m1])  # type: ignore[misc]
    assert np.allclose(est_ba, ab.T.ravel())
    assert theorem2_bound(DOMAIN, ("c",), [m1, m2]) is None


def test_error_bounds_hold_empirically() -> None:
    """95% bounds cover the true L1 error in ≥ 90% of 50 seeded runs (per theorem)."""
    rho = 0.5
    workload = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "e"), ("d", "e"), ("b", "e"), ("a", "d")]
    covered = {"theorem 2": [], "theorem 4": []}  # type: ignore[var-annotated]
    sharpness = []
    for seed in range(50):
        truth = synthetic(1_000 + seed)
        result = run_aim(DOMAIN, truth, rho, workload, options=MechanismOptions(rounds=8, **FAST))
        measured = [r.attributes for r in result.rounds]
        for r in workload:
            answer = result.model.marginal(r).ravel()
            found = error_bound(DOMAIN, r, answer, result.measurements, result.unmeasured_bounds)
            expected = "theorem 2" if covered_by(r, measured) else "theorem 4"
            if found is None:
                assert expected == "theorem 4"  # only unmeasured marginals may lack a bound
                continue
            assert found.theorem == expected and found.confidence == 0.95
            error = float(np.abs(answer - truth(r)).sum())
            covered[found.theorem].append(error <= found.bound)
            if found.theorem == "theorem 2":
                raw = theorem2_bound(DOMAIN, r, result.measurements)
                estimate, _ = combined_estimate(DOMAIN, r, result.measurements)  # type: ignore[misc]
                sharpness.append(np.abs(estimate - truth(r).ravel()).sum() / raw.bound)  # type: ignore[union-attr]
    assert len(covered["theorem 2"]) >= 50 and len(covered["theorem 4"]) >= 20
    for theorem, hits in covered.items():
        assert np.mean(hits) >= 0.9, theorem
    # not vacuous: the combined estimate's error is a sizeable fraction of its bound
    assert 0.3 < float(np.mean(sharpness)) < 1.0


def test_error_bound_picks_theorem_and_moves_theorem4_to_later_models() -> None:
    from app.pgm.measurement import Measurement
    from app.privacy.mechanisms import UnmeasuredBound

    m = Measurement(("a", "b"), np.ones(6), "gaussian", 2.0)
    unmeasured = {("c", "d"): UnmeasuredBound(("c", "d"), 50.0, 7, 0.95)}
    answer_ab = np.ones((2, 3))
    found = error_bound(DOMAIN, ("b", "a"), answer_ab.T, [m], unmeasured)
    assert found is not None and found.theorem == "theorem 2"
    # n_r = 6, σ̄ = 2: √(2/π)·2·6 + √(2 ln 20)·2·√6, and the model answer equals ȳ
    expected = math.sqrt(2 / math.pi) * 12 + math.sqrt(2 * math.log(20)) * 2 * math.sqrt(6)
    assert found.bound == pytest.approx(expected)
    reference = np.arange(20.0).reshape(4, 5)
    later = reference + 0.5
    same = error_bound(DOMAIN, ("c", "d"), reference, [m], unmeasured)
    assert same is not None and same.theorem == "theorem 4" and same.bound == 50.0
    moved = error_bound(DOMAIN, ("d", "c"), later.T, [m], unmeasured, reference_answer=reference)
    assert moved is not None and moved.bound == pytest.approx(50.0 + 0.5 * 20)
    assert error_bound(DOMAIN, ("a", "e"), np.ones((2, 3)), [m], unmeasured) is None


def test_each_true_marginal_is_counted_once_however_many_rounds() -> None:
    """Selection and measurement reuse the true answers: no rescan per candidate per round."""
    truth = synthetic(7)
    counted: list[tuple[str, ...]] = []

    def counting(attrs: tuple[str, ...]) -> np.ndarray:
        counted.append(tuple(attrs))
        return truth(attrs)

    result = run_aim(DOMAIN, counting, 1.0, ALL_PAIRS, options=MechanismOptions(rounds=40, **FAST))
    selections = [r for r in result.rounds if r.selection is not None]
    assert len(selections) >= 5  # several rounds, each scoring every candidate
    assert len(counted) == len(set(counted))  # each marginal read from the data once
    assert set(counted) <= set(candidate_weights(DOMAIN, normalise_workload(DOMAIN, ALL_PAIRS)))


def _recorded_fits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(solver, max_iterations) of every fit the mechanism engine asks app.pgm for."""
    from app.privacy.mechanisms import fitting

    calls: list[tuple[str, int]] = []
    real_fit = fitting.fit

    def spy(*args: object, **kwargs: object) -> object:
        calls.append((str(kwargs.get("solver", "default")), int(kwargs["max_iterations"])))  # type: ignore[call-overload]
        return real_fit(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fitting, "fit", spy)
    return calls


def test_between_round_fits_leave_admm_once_one_is_too_much_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ADMM between rounds while its fits are little work (cells × iterations, never a
    time); after one of more than `round_admm_max_work`, every later between-round fit
    is mirror descent."""
    truth = synthetic(3)
    calls = _recorded_fits(monkeypatch)
    run_aim(DOMAIN, truth, 0.2, ALL_PAIRS[:4], options=MechanismOptions(rounds=8, **FAST))
    between = [solver for solver, _ in calls[:-1]]
    assert between and set(between) == {"admm"}  # the small model is little work

    calls.clear()
    options = MechanismOptions(rounds=8, round_admm_max_work=1, **FAST)
    run_aim(DOMAIN, truth, 0.2, ALL_PAIRS[:4], options=options)
    between = [solver for solver, _ in calls[:-1]]
    assert between[0] == "admm" and len(between) > 2
    assert set(between[1:]) == {"mirror_descent"}
    assert calls[-1][1] == options.final_fit_iterations  # the final fit is not bounded


def test_an_admm_fit_s_work_is_its_cells_times_its_iterations() -> None:
    from app.pgm.estimation import FitRecord
    from app.privacy.mechanisms.fitting import admm_work, keeps_admm

    options = MechanismOptions(round_admm_max_work=700)
    fitted = FitRecord(solver="admm", iterations=7, model_cells=100, seconds=3600.0)
    assert admm_work(fitted) == 700 and keeps_admm(fitted, options)  # an hour: no matter
    more = FitRecord(solver="admm", iterations=8, model_cells=100, seconds=0.001)
    assert not keeps_admm(more, options)
    descent = FitRecord(solver="mirror_descent", iterations=10**6, model_cells=10**6)
    assert keeps_admm(descent, options)  # only ADMM's own fits decide
    with pytest.raises(ValueError, match="round_admm_max_work"):
        MechanismOptions(round_admm_max_work=0)


def test_between_round_mirror_descent_is_bounded_by_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """cells × iterations ≤ round_fit_work, but never fewer than round_min_iterations."""
    truth = synthetic(4)
    calls = _recorded_fits(monkeypatch)
    plenty = MechanismOptions(rounds=8, round_admm_max_cells=0, **FAST)
    run_aim(DOMAIN, truth, 0.2, ALL_PAIRS[:4], options=plenty)
    assert {iterations for _, iterations in calls[:-1]} == {plenty.fit_iterations}

    calls.clear()
    options = MechanismOptions(
        rounds=8, round_admm_max_cells=0, round_fit_work=1, round_min_iterations=3, **FAST
    )
    run_aim(DOMAIN, truth, 0.2, ALL_PAIRS[:4], options=options)
    between = calls[:-1]
    assert between and all(solver == "mirror_descent" for solver, _ in between)
    assert {iterations for _, iterations in between} == {3}
    assert calls[-1][1] == options.final_fit_iterations
