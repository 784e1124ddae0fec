"""AIM's noise term: the noise a measured marginal leaves once the model is fitted."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

from app.pgm.domain import Domain
from app.privacy.mechanisms import MechanismOptions, run_aim
from app.privacy.mechanisms import aim as aim_module
from app.privacy.mechanisms import engine as engine_module
from app.privacy.mechanisms.bounds import SQRT_2_OVER_PI, theorem4_round_bound
from app.privacy.mechanisms.coarse import Coarse
from app.privacy.mechanisms.fitted_noise import fitted_noise, kept_share
from app.privacy.mechanisms.rounds import Round, Selection
from tests.privacy.privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

SHAPES = Domain(("s", "t", "u", "v"), (3, 9, 4, 5))


def _product(domain: Domain, attrs: tuple[str, ...], rows: float, seed: int) -> np.ndarray:
    """An independent model's counts over `attrs` (uneven one-way marginals)."""
    rng = np.random.default_rng(seed)
    counts = np.array(rows)
    for size in domain.shape(attrs):
        counts = np.multiply.outer(counts, rng.dirichlet(np.full(size, 0.7)))
    return counts


def _simulated(domain: Domain, attrs: tuple[str, ...], mu: np.ndarray, sigma: float) -> float:
    """Monte Carlo of what `fitted_noise` approximates: Gaussian noise without its grand
    mean and main effects, added to μ, projected onto the non-negative counts of μ's total."""
    rng = np.random.default_rng(11)
    flat, total, errors = mu.ravel(), float(mu.sum()), []
    for _ in range(1_500):
        noise = rng.normal(0.0, sigma, mu.shape)
        main = np.full(mu.shape, noise.mean())
        for axis in range(noise.ndim):
            others = tuple(a for a in range(noise.ndim) if a != axis)
            main += noise.mean(axis=others, keepdims=True) - noise.mean()
        y = flat + (noise - main).ravel()
        ordered = np.sort(y)[::-1]  # Euclidean projection onto {x ≥ 0, Σx = total}
        shift = (np.cumsum(ordered) - total) / np.arange(1, y.size + 1)
        tau = shift[np.nonzero(ordered > shift)[0][-1]]
        errors.append(float(np.abs(np.maximum(y - tau, 0.0) - flat).sum()))
    return float(np.mean(errors))


@pytest.mark.parametrize(
    ("attrs", "rows", "sigma"),
    [(("s", "t"), 344, 15.0), (("t", "v"), 344, 15.0), (("s", "u", "v"), 1_000, 20.0)],
)
def test_fitted_noise_is_the_noise_left_after_the_one_way_marginals_and_clipping(
    attrs: tuple[str, ...], rows: int, sigma: float
) -> None:
    mu = _product(SHAPES, attrs, rows, seed=len(attrs))
    found = fitted_noise(SHAPES, {attrs: mu}, sigma)[attrs]
    assert found == pytest.approx(_simulated(SHAPES, attrs, mu, sigma), rel=0.03)
    # well below the paper's raw term on a few hundred rows: that is the point of it
    assert found < 0.7 * SQRT_2_OVER_PI * sigma * SHAPES.cells(attrs)


def test_with_many_rows_a_cell_keeps_the_part_of_its_noise_the_margins_do_not_fix() -> None:
    # κ_r = 1 − (1 + Σ(n_i − 1)) / n_r: (3 + 9 − 1)/27 fixed for a 3 × 9 pair, 1/n one-way
    assert kept_share(SHAPES, ("s", "t")) == pytest.approx(16 / 27)
    assert kept_share(SHAPES, ("s", "u", "v")) == pytest.approx(1 - 10 / 60)
    assert kept_share(SHAPES, ("t",)) == pytest.approx(8 / 9)
    for attrs in [("s", "t"), ("u",), ("s", "u", "v")]:
        mu = _product(SHAPES, attrs, 1e9, seed=3)  # no cell near zero: nothing clipped
        found = fitted_noise(SHAPES, {attrs: mu}, 4.0)[attrs]
        expected = SQRT_2_OVER_PI * 4.0 * math.sqrt(kept_share(SHAPES, attrs)) * mu.size
        assert found == pytest.approx(expected, rel=1e-4)


def test_a_model_with_few_rows_per_cell_keeps_less_noise() -> None:
    attrs = ("t", "v")
    spread = np.full((9, 5), 300 / 45)
    sparse = np.zeros((9, 5))
    sparse[np.arange(5), np.arange(5)] = 60.0  # the same 300 rows in 5 of 45 cells
    noise = fitted_noise(SHAPES, {("t", "v"): spread}, 10.0)[attrs]
    assert fitted_noise(SHAPES, {attrs: sparse}, 10.0)[attrs] < 0.8 * noise
    # more noise, more kept; and never more than the raw term
    louder = fitted_noise(SHAPES, {attrs: spread}, 20.0)[attrs]
    assert noise < louder < SQRT_2_OVER_PI * 20.0 * 45


def test_candidates_are_independent_of_the_batch_they_come_in() -> None:
    estimates = {
        r: _product(SHAPES, r, 500, seed=k)
        for k, r in enumerate(combinations(SHAPES.attributes, 2))
    }
    together = fitted_noise(SHAPES, estimates, 12.0)
    for r, mu in estimates.items():
        assert together[r] == pytest.approx(fitted_noise(SHAPES, {r: mu}, 12.0)[r], rel=1e-6)
    # an empty model (no rows anywhere) and a one-valued attribute are finite, not NaN
    lone = Domain(("x", "y"), (1, 4))
    empty = fitted_noise(lone, {("y",): np.zeros(4), ("x",): np.zeros(1)}, 5.0)
    assert empty[("x",)] == 0.0 and math.isfinite(empty[("y",)]) and empty[("y",)] >= 0.0
    assert fitted_noise(SHAPES, {}, 5.0) == {}


def test_aim_scores_and_filters_with_the_fitted_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each selection subtracts the fitted noise the model gave its candidates at the
    round's σ, keeps the chosen one's for Theorem 4, and with `fitted_noise=False` the
    paper's √(2/π)·σ·n_r."""
    computed: dict[int, dict[tuple[str, ...], float]] = {}  # next round's index -> terms
    real = aim_module.noise_terms

    def spy(run, candidates, sigma, options_):  # type: ignore[no-untyped-def]
        terms = real(run, candidates, sigma, options_)
        full = [r for r in candidates if not isinstance(r, Coarse)]
        estimates = {r: run.estimate(r) for r in full}
        assert {r: terms[r] for r in full} == fitted_noise(run.domain, estimates, sigma)
        for r in candidates:  # a coarse form's over its groups, as if they were values
            if isinstance(r, Coarse):
                grouped = Domain(r.attributes, r.groups)
                found = fitted_noise(grouped, {r.attributes: run.estimate_of(r)}, sigma)
                assert terms[r] == found[r.attributes]
        computed[len(run.rounds)] = terms  # (free annealing may redo it before the round)
        return terms

    bounded: list[tuple[int, tuple[str, ...], float | None]] = []
    real_bound = engine_module.theorem4_round_bound

    def bound_spy(domain, round_, attrs, weight, noise=None, confidence=0.95):  # type: ignore[no-untyped-def]
        bounded.append((round_.index, attrs, noise))
        return real_bound(domain, round_, attrs, weight, noise, confidence)

    monkeypatch.setattr(aim_module, "noise_terms", spy)
    monkeypatch.setattr(engine_module, "theorem4_round_bound", bound_spy)
    options = MechanismOptions(**FAST)  # type: ignore[arg-type]
    result = run_aim(DOMAIN, synthetic(3, 3_000), 0.05, ALL_PAIRS, options=options)
    selected = [r for r in result.rounds if r.selection is not None]
    assert selected
    for r in selected:
        assert r.selection is not None and r.selection.bias is None
        chosen = r.attributes if r.coarse is None else r.coarse
        assert r.selection.chosen_noise == computed[r.index][chosen]
        assert r.selection.chosen_noise < SQRT_2_OVER_PI * r.sigma * r.values.size
    # Theorem 4 gets each unmeasured workload marginal's own term from its last round
    assert bounded and len(bounded) == len(result.unmeasured_bounds)
    for index, attrs, noise in bounded:
        assert noise == computed[index][attrs]

    monkeypatch.setattr(aim_module, "noise_terms", real)
    paper = MechanismOptions(fitted_noise=False, **FAST)  # type: ignore[arg-type]
    raw = run_aim(DOMAIN, synthetic(3, 3_000), 0.05, ALL_PAIRS, options=paper)
    for r in raw.rounds:
        if r.selection is not None:
            assert r.selection.bias == SQRT_2_OVER_PI
            expected = SQRT_2_OVER_PI * r.sigma * r.values.size
            assert r.selection.chosen_noise == pytest.approx(expected, rel=1e-12)


def _selected_round(selection: Selection) -> Round:
    return Round(
        index=9,
        kind="select+measure",
        attributes=("a", "b"),
        sigma=10.0,
        epsilon=0.1,
        rho=0.0,
        values=np.zeros(6, dtype=np.int64),
        selection=selection,
    )


def test_theorem4_uses_each_candidates_own_noise_term() -> None:
    base = {"candidates": 5, "sensitivity": 2.0, "chosen_weight": 2.0, "error_before": 40.0}
    per_candidate = _selected_round(
        Selection(**base, bias=None, workload_candidates=(("c", "d"),), chosen_noise=30.0)
    )
    lam1, lam2 = math.sqrt(2 * math.log(2 / 0.05)), math.log(2 / 0.05)
    chosen = 2.0 * (40.0 + SQRT_2_OVER_PI * 10.0 * 6 - 30.0 + lam1 * 10.0 * math.sqrt(6))
    slack = 2.0 * 2.0 / 0.1 * (math.log(5) + lam2)
    found = theorem4_round_bound(DOMAIN, per_candidate, ("c", "d"), 4.0, 55.0)
    assert found == pytest.approx(55.0 + (chosen + slack) / 4.0)
    with pytest.raises(ValueError, match="per candidate"):
        theorem4_round_bound(DOMAIN, per_candidate, ("c", "d"), 4.0)
    # a round stored before the chosen term was kept: b·σ·n_r for both
    old = _selected_round(Selection(**base, bias=SQRT_2_OVER_PI, workload_candidates=()))
    raw_cd = SQRT_2_OVER_PI * 10.0 * 20  # (the chosen's raw term cancels its own noise's)
    chosen_old = 2.0 * (40.0 + lam1 * 10.0 * math.sqrt(6))
    expected = raw_cd + (chosen_old + slack) / 4.0
    assert theorem4_round_bound(DOMAIN, old, ("c", "d"), 4.0) == pytest.approx(expected)
    # the record round-trips, and one with neither term is refused
    assert Selection.from_dict(per_candidate.selection.to_dict()) == per_candidate.selection  # type: ignore[union-attr]
    stored = old.selection.to_dict()  # type: ignore[union-attr]
    assert (
        Selection.from_dict({k: v for k, v in stored.items() if k != "chosen_noise"})
        == old.selection
    )
    with pytest.raises(ValueError, match="noise term"):
        Selection(**base, bias=None, workload_candidates=())
