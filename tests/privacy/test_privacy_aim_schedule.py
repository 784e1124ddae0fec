"""AIM's budget split and noise filter (`init_share`, `noise_filter`) on small tables."""

from __future__ import annotations

import math
from itertools import combinations, pairwise

import numpy as np
import pytest

from app.pgm.domain import Domain
from app.privacy.mechanisms import MechanismOptions, run_aim
from app.privacy.mechanisms import aim as aim_module
from app.privacy.mechanisms.aim import (
    PAPER_SCHEDULE,
    aim_schedule,
    initial_schedule,
    noise_filter,
    run_options,
)
from app.privacy.mechanisms.bounds import SQRT_2_OVER_PI
from app.privacy.mechanisms.budget import round_cost
from app.privacy.mechanisms.oneway import (
    TOPUP_MAX,
    TOPUP_TV,
    WIDE_FILTER_FACTOR,
    estimated_rows,
    filter_factor,
    oneway_noise_share,
    topup_sigmas,
)
from app.privacy.mechanisms.rounds import Round
from tests.privacy.privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

PAPER = {"init_share": None, "noise_filter": None, "rounds_per_attribute": 16, "anneal_factor": 2}


def test_init_share_splits_the_oneway_round_by_cells_to_the_two_thirds() -> None:
    # (the one-way round in one piece: its two halves, test_privacy_aim_halves.py)
    rho, options = 0.05, MechanismOptions(init_share=0.3, precise_oneway_share=None)
    oneway = [(a,) for a in DOMAIN.attributes]
    sigmas, sigma, epsilon = initial_schedule(DOMAIN, rho, oneway, options)
    costs = {r: round_cost(s, 0.0) for r, s in sigmas.items()}
    # the one-way round spends exactly β·ρ, each marginal ∝ n^(2/3)
    assert math.fsum(costs.values()) == pytest.approx(0.3 * rho, rel=1e-12)
    weights = {r: DOMAIN.cells(r) ** (2 / 3) for r in oneway}
    for r in oneway:
        assert costs[r] / costs[oneway[0]] == pytest.approx(weights[r] / weights[oneway[0]])
    # larger attributes get less noise per cell than an equal split would give them
    assert sigmas[("d",)] < sigmas[("a",)]
    # the first selection round: (1 − β)·ρ / T, α measuring
    rounds_t, largest, first_epsilon = aim_schedule(DOMAIN, rho, options)
    assert round_cost(sigma, epsilon) == pytest.approx(0.7 * rho / rounds_t, rel=1e-12)
    # what the dry run shows: the largest σ of the schedule, the first selection's ε
    assert largest == max(sigma, *sigmas.values()) and first_epsilon == epsilon
    assert 1 / (2 * sigma**2) == pytest.approx(0.9 * round_cost(sigma, epsilon), rel=1e-9)


def test_without_init_share_the_paper_schedule_is_kept() -> None:
    rho = 0.05
    options = MechanismOptions(**PAPER)  # type: ignore[arg-type]
    oneway = [(a,) for a in DOMAIN.attributes]
    sigmas, sigma, epsilon = initial_schedule(DOMAIN, rho, oneway, options)
    rounds_t, sigma0, epsilon0 = aim_schedule(DOMAIN, rho, options)
    assert set(sigmas.values()) == {sigma0} and (sigma, epsilon) == (sigma0, epsilon0)
    assert sigma0 == pytest.approx(math.sqrt(rounds_t / (2 * 0.9 * rho)), rel=1e-12)


def _raw(domain: Domain, candidates: list[tuple[str, ...]], sigma: float) -> dict:  # type: ignore[type-arg]
    """The paper's noise terms √(2/π)·σ·n_r."""
    return {r: SQRT_2_OVER_PI * sigma * domain.cells(r) for r in candidates}


def test_noise_filter_keeps_what_the_noise_leaves_measurable() -> None:
    domain = Domain(("a", "b", "c"), (2, 10, 40))
    candidates = [("a",), ("b",), ("c",), ("a", "b"), ("b", "c")]
    sigma, rows = 5.0, 200.0
    noise = _raw(domain, candidates, sigma)
    kept = noise_filter(candidates, noise, rows, 0.5)
    # expected noise √(2/π)·σ·n_r against 0.5·N̂ = 100: n_r ≤ 25 passes
    assert kept == [("a",), ("b",), ("a", "b")]
    assert all(SQRT_2_OVER_PI * sigma * domain.cells(r) <= 100 for r in kept)
    assert noise_filter(candidates, noise, rows, None) == candidates


def test_noise_filter_counts_what_a_weak_selection_may_miss_by() -> None:
    domain = Domain(("a", "b", "c"), (2, 10, 40))
    candidates = [("a",), ("b",), ("a", "b")]
    weights = {("a",): 1.0, ("b",): 1.0, ("a", "b"): 2.0}
    sigma, rows = 1.0, 200.0
    noise = _raw(domain, candidates, sigma)
    assert noise_filter(candidates, noise, rows, 0.5) == candidates
    # 2Δ·ln|C|/ε = 2·2·ln 3/ε in w_r units: at ε = 0.1 it is 43.9, so (a,) and (b,)
    # (w = 1) need 43.9 + noise ≤ 100 and (a, b) (w = 2) 22.0 + noise ≤ 100
    kept = noise_filter(candidates, noise, rows, 0.5, (weights, 0.1))
    assert kept == candidates
    reach = 4 * math.log(3) / 0.02  # ε = 0.02: 219.7
    kept = noise_filter(candidates, noise, rows, 0.5, (weights, 0.02))
    assert kept == [r for r in candidates if reach / weights[r] + 0.8 * domain.cells(r) <= 100]
    assert kept == []
    assert noise_filter(candidates, noise, rows, 0.5, (weights, 0.04)) == [("a", "b")]


def test_noise_filter_weighs_the_selection_by_what_its_noise_leaves_measurable() -> None:
    """With a 3-way workload the triples weigh most; where their noise alone rules them
    out, the exponential mechanism never sees them, so Δ is the heaviest of the rest
    (|C| still counts every candidate: at least what the mechanism chooses from)."""
    domain = Domain(("a", "b", "c", "d"), (2, 2, 30, 30))
    pairs = [("a", "b"), ("a", "c")]
    triples = [("a", "c", "d"), ("b", "c", "d")]  # 1,800 cells: noise alone above 0.5·N̂
    candidates = [("a",), ("b",), *pairs, *triples]
    weights = {("a",): 3.0, ("b",): 3.0, ("a", "b"): 6.0, ("a", "c"): 6.0}
    weights |= dict.fromkeys(triples, 40.0)
    sigma, rows, epsilon = 1.0, 1000.0, 0.04
    kept = noise_filter(candidates, _raw(domain, candidates, sigma), rows, 0.5, (weights, epsilon))
    reach = 2.0 * 6.0 * math.log(len(candidates)) / epsilon  # Δ = 6, not 40
    expected = [
        r
        for r in candidates
        if SQRT_2_OVER_PI * sigma * domain.cells(r) + reach / weights[r] <= 500
    ]
    assert kept == expected and ("a", "b") in kept and not set(triples) & set(kept)
    # with Δ = 40, the triples' weight, every pair was out
    old_reach = 2.0 * 40.0 * math.log(len(candidates)) / epsilon
    assert all(SQRT_2_OVER_PI * sigma * domain.cells(r) + old_reach / 6.0 > 500 for r in pairs)
    # the mechanism's own sensitivity, the heaviest kept candidate, is within the Δ assumed
    assert max(weights[r] for r in kept) <= 6.0
    # where nothing is measurable on its noise alone, nothing is kept (and nothing fails)
    loud = _raw(domain, candidates, 400.0)
    assert noise_filter(candidates, loud, rows, 0.5, (weights, epsilon)) == []


def test_noise_filter_steps_delta_down_past_triples_their_own_slack_keeps_out() -> None:
    """Triples measurable on their noise alone but not with their slack: Δ steps down to
    the pairs' weight, the triples are left out, and the pairs pass with Δ = 6."""
    pairs = [("a", "b"), ("a", "c")]
    triples = [("a", "b", "c"), ("a", "c", "d")]
    candidates = [("a",), ("b",), *pairs, *triples]
    weights = {("a",): 3.0, ("b",): 3.0} | dict.fromkeys(pairs, 6.0)
    weights |= dict.fromkeys(triples, 40.0)
    noise = {("a",): 10.0, ("b",): 10.0} | dict.fromkeys(pairs, 50.0)
    noise |= dict.fromkeys(triples, 200.0)  # within 0.5·N̂ = 500 on its own
    rows, epsilon = 1000.0, 0.01
    reach = 2.0 * math.log(len(candidates)) / epsilon  # 358 a unit of Δ/w_r
    assert 200.0 + reach * 40.0 / 40.0 > 500  # the triples' own slack keeps them out
    assert 50.0 + reach * 40.0 / 6.0 > 500  # and Δ = 40 would keep the pairs out
    kept = noise_filter(candidates, noise, rows, 0.5, (weights, epsilon))
    assert kept == pairs
    assert all(noise[r] + reach * 6.0 / weights[r] <= 500 for r in kept)
    assert max(weights[r] for r in kept) <= 6.0  # the mechanism's sensitivity, within Δ
    # with Δ = 40 still in reach of a triple, nothing steps down
    assert set(triples) <= set(noise_filter(candidates, noise, rows, 0.5, (weights, 0.02)))
    # nothing multi-way at any level: the heaviest level's set (here empty)
    assert noise_filter(candidates, noise, rows, 0.5, (weights, 0.001)) == []


def test_noise_filter_without_a_multiway_candidate_keeps_the_first_levels_set() -> None:
    """Where no level lets a multi-way candidate in, the set is the first level's, not
    that of a lower level whose smaller Δ would let more one-way marginals in."""
    pairs = [("a", "b"), ("a", "c")]
    candidates = [("a",), ("b",), *pairs]
    weights = {("a",): 3.0, ("b",): 3.0} | dict.fromkeys(pairs, 6.0)
    # the pairs are measurable on their noise (≤ 0.5·N̂ = 500), never with their slack
    noise = {("a",): 10.0, ("b",): 10.0} | dict.fromkeys(pairs, 450.0)
    epsilon = 2.0 * math.log(len(candidates)) / 300.0  # reach 300 a unit of Δ/w_r
    # at Δ = 6 nothing passes; at Δ = 3 the one-ways would
    assert 450.0 + 300.0 > 500 and 10.0 + 300.0 * 6.0 / 3.0 > 500 >= 10.0 + 300.0
    assert noise_filter(candidates, noise, 1000.0, 0.5, (weights, epsilon)) == []
    # with a larger ε the one-ways pass at Δ = 6 already, and that set is kept
    wider = 2.0 * math.log(len(candidates)) / 200.0
    assert 10.0 + 200.0 * 6.0 / 3.0 <= 500 < 450.0 + 200.0
    assert noise_filter(candidates, noise, 1000.0, 0.5, (weights, wider)) == [("a",), ("b",)]


def test_a_three_way_workload_still_measures_pairs() -> None:
    """All 2- and 3-way marginals of 500 rows, whose triples are too noisy to measure:
    AIM measures pairs. (While the triples' weight set Δ, no pair passed the noise
    filter: 0 pairs in 40 runs; now about 9 runs in 10 measure one, so five runs
    without a pair would fail about once in 10⁵.)"""
    domain, truth = _scarce_table(rows=500)
    workload = [c for k in (2, 3) for c in combinations(domain.attributes, k)]
    options = MechanismOptions(**FAST)  # type: ignore[arg-type]
    pairs = 0
    for _ in range(5):
        result = run_aim(domain, truth, 0.02, workload, options=options)
        pairs += sum(
            1 for r in result.rounds if r.kind == "select+measure" and len(r.attributes) > 1
        )
        assert result.rho_used == pytest.approx(0.02, rel=1e-9)
    assert pairs > 0


def test_topup_follows_a_noisy_oneway_round_only() -> None:
    rho = 0.02
    options = MechanismOptions(init_share=0.2)
    oneway = [(a,) for a in DOMAIN.attributes]
    sigmas, _, _ = initial_schedule(DOMAIN, rho, oneway, options)

    def init(rows: int) -> list[Round]:
        out = []
        for r in oneway:
            values = np.full(DOMAIN.cells(r), rows // DOMAIN.cells(r))
            out.append(Round(0, "measure", r, sigmas[r], 0.0, round_cost(sigmas[r], 0.0), values))
        return out

    # expected noise √(2/π)·σ_i·n_i / 2N̂, averaged: above 0.05 at 300 rows, not at 30,000
    noisy = init(300)
    share = [SQRT_2_OVER_PI * r.sigma * r.values.size / (2 * estimated_rows(noisy)) for r in noisy]
    assert sum(share) / len(share) > 0.05
    planned = topup_sigmas(DOMAIN, rho, noisy, options)
    assert list(planned) == oneway
    # what brings the mean share down to 0.05: β((s/0.05)² − 1)·ρ, the two rounds ≤ 0.7ρ
    mean = sum(share) / len(share)
    extra = min(0.2 * ((mean / TOPUP_TV) ** 2 - 1), TOPUP_MAX - 0.2)
    assert math.fsum(round_cost(s, 0.0) for s in planned.values()) == pytest.approx(
        extra * rho, rel=1e-12
    )
    assert topup_sigmas(DOMAIN, rho, init(30_000), options) == {}
    assert topup_sigmas(DOMAIN, rho, noisy, MechanismOptions(**PAPER)) == {}  # type: ignore[arg-type]


def _oneway_round(rows: int, options: MechanismOptions, rho: float = 0.02) -> list[Round]:
    """DOMAIN's one-way round as `options` schedules it, each marginal `rows` rows flat."""
    oneway = [(a,) for a in DOMAIN.attributes]
    sigmas, _, _ = initial_schedule(DOMAIN, rho, oneway, options)
    return [
        Round(
            0,
            "measure",
            r,
            sigmas[r],
            0.0,
            round_cost(sigmas[r], 0.0),
            np.full(DOMAIN.cells(r), rows // DOMAIN.cells(r)),
        )
        for r in oneway
    ]


def test_noise_filter_widens_only_after_a_precise_oneway_round() -> None:
    options = MechanismOptions()
    assert options.noise_filter == 0.5 and options.wide_filter_share == 0.2
    precise, noisy = _oneway_round(30_000, options), _oneway_round(100, options)
    s = oneway_noise_share(precise)
    expected = [
        SQRT_2_OVER_PI * r.sigma * r.values.size / (2 * estimated_rows(precise)) for r in precise
    ]
    assert s == pytest.approx(sum(expected) / len(expected), rel=1e-12)
    assert s <= 0.2 < oneway_noise_share(noisy)
    assert filter_factor(precise, options) == WIDE_FILTER_FACTOR * 0.5 == 1.0
    assert filter_factor(noisy, options) == 0.5
    # the limit is inclusive; without wide_filter_share (and with no filter) nothing widens
    assert filter_factor(precise, MechanismOptions(wide_filter_share=s)) == 1.0
    assert filter_factor(precise, MechanismOptions(wide_filter_share=s * 0.999)) < 1.0
    narrowed_at_once = MechanismOptions(wide_filter_share=s * 0.999, wide_filter_ramp=0.0)
    assert filter_factor(precise, narrowed_at_once) == 0.5
    assert filter_factor(precise, MechanismOptions(wide_filter_share=None)) == 0.5
    assert filter_factor(precise, MechanismOptions(noise_filter=None)) is None
    with pytest.raises(ValueError, match="wide_filter_share"):
        MechanismOptions(wide_filter_share=0.0)


def test_the_wide_filter_narrows_back_linearly_over_its_ramp() -> None:
    """Past `wide_filter_share` the factor falls linearly over `wide_filter_ramp` of the
    noise share s, to `noise_filter` at its end; a ramp of 0 is the step the paper's
    schedule (and a job stored without the key) keeps."""
    options = MechanismOptions()
    assert options.wide_filter_ramp == 0.05 and PAPER_SCHEDULE["wide_filter_ramp"] == 0.0
    noisy = _oneway_round(100, options)
    s = oneway_noise_share(noisy)
    assert s > 0.2  # so every limit below is positive

    def factor(wide: float, ramp: float) -> float | None:
        return filter_factor(noisy, MechanismOptions(wide_filter_share=wide, wide_filter_ramp=ramp))

    ramp = 0.05
    assert factor(s, ramp) == 1.0
    for past in (0.2, 0.5, 0.8):  # s lies `past` of the way along the ramp
        assert factor(s - past * ramp, ramp) == pytest.approx(0.5 * (2.0 - past), rel=1e-9)
    assert factor(s - ramp, ramp) == 0.5 and factor(s - 2 * ramp, ramp) == 0.5
    # without a ramp, just past the limit is the narrow filter at once
    assert factor(s * 0.999, 0.0) == 0.5 and factor(s, 0.0) == 1.0
    for bad in (-0.01, math.inf, math.nan):
        with pytest.raises(ValueError, match="wide_filter_ramp"):
            MechanismOptions(wide_filter_ramp=bad)


@pytest.mark.parametrize(
    ("rows", "wide", "ramp", "factor"),
    [
        (20_000, 0.2, 0.05, 1.0),
        (20_000, None, 0.05, 0.5),
        (30, 0.2, 0.05, 0.5),
        (30, 1e-6, 100.0, None),  # s lies early on a long ramp: a factor inside (0.5, 1)
    ],
)
def test_a_run_filters_with_the_factor_its_oneway_round_allows(
    rows: int,
    wide: float | None,
    ramp: float,
    factor: float | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every selection round's noise filter gets the factor `filter_factor` gives the run's
    own one-way round (drawn here: 20,000 rows at ρ = 0.05 are precise; 30 are not, their
    noise share s 0.4 or more, past the ramp)."""
    seen: list[float | None] = []
    passed: list[float] = []  # the noise term of every candidate the filter kept
    real = aim_module.noise_filter

    def spy(candidates, noise, n_rows, factor_, selection=None):  # type: ignore[no-untyped-def]
        seen.append(factor_)
        kept = real(candidates, noise, n_rows, factor_, selection)
        passed.extend(noise[r] for r in kept)
        return kept

    monkeypatch.setattr(aim_module, "noise_filter", spy)
    options = MechanismOptions(
        wide_filter_share=wide,
        wide_filter_ramp=ramp,
        precise_oneway_share=None,  # the one-way round in one piece
        **FAST,  # type: ignore[arg-type]
    )
    result = run_aim(DOMAIN, synthetic(5, rows), 0.05, ALL_PAIRS, options=options)
    init = result.rounds[: len(DOMAIN.attributes)]
    if factor is None:
        factor = filter_factor(init, options)
        assert factor is not None and 0.5 < factor < 1.0
    assert filter_factor(init, options) == factor
    assert seen and set(seen) == {factor}
    assert all(noise <= factor * estimated_rows(init) for noise in passed)


def test_estimated_rows_is_the_inverse_variance_mean_of_the_oneway_totals() -> None:
    def measured(attrs: tuple[str, ...], values: list[int], sigma: float) -> Round:
        return Round(0, "measure", attrs, sigma, 0.0, round_cost(sigma, 0.0), np.array(values))

    rounds = [measured(("a",), [60, 40], 1.0), measured(("b",), [30, 30, 30], 2.0)]
    w1, w2 = 1 / (2 * 1.0), 1 / (3 * 4.0)
    assert estimated_rows(rounds) == pytest.approx((w1 * 100 + w2 * 90) / (w1 + w2))
    assert estimated_rows([measured(("a",), [-5, -3], 1.0)]) == 1.0  # never below one row


def _scarce_table(rows: int, seed: int = 3):  # type: ignore[no-untyped-def]
    """A small-N table: 6 attributes of 2-12 values, `rows` rows."""
    domain = Domain(("a", "b", "c", "d", "e", "f"), (2, 12, 8, 3, 10, 6))
    rng = np.random.default_rng(seed)
    data = np.stack([rng.integers(0, n, rows) for n in domain.sizes], axis=1)
    data[:, 1] = (data[:, 0] * 5 + rng.integers(0, 3, rows)) % 12

    def truth(attrs: tuple[str, ...]) -> np.ndarray:
        idx = [domain.index(x) for x in attrs]
        flat = np.ravel_multi_index(tuple(data[:, i] for i in idx), domain.shape(attrs))
        return np.bincount(flat, minlength=domain.cells(attrs))

    return domain, truth


@pytest.mark.parametrize("share", [0.2, 0.6])
def test_small_n_run_measures_only_what_its_noise_allows(share: float) -> None:
    domain, truth = _scarce_table(rows=300)
    rho = 0.02
    options = MechanismOptions(
        init_share=share,
        noise_filter=0.5,
        precise_oneway_share=None,
        **FAST,  # type: ignore[arg-type]
    )
    workload = list(combinations(domain.attributes, 2))
    result = run_aim(domain, truth, rho, workload, options=options)
    rounds = result.rounds
    oneway = [(a,) for a in domain.attributes]
    init, later = rounds[: len(oneway)], rounds[len(oneway) :]
    sigmas, sigma1, _ = initial_schedule(domain, rho, oneway, options)
    assert [r.attributes for r in init] == oneway
    assert [r.sigma for r in init] == [sigmas[r.attributes] for r in init]
    assert math.fsum(r.rho for r in init) == pytest.approx(share * rho, rel=1e-12)
    rows = estimated_rows(init)
    # 300 rows: the one-way round's noise is a large share of them, so a top-up follows
    planned = topup_sigmas(domain, rho, init, options)
    assert planned and [r.attributes for r in later[: len(oneway)]] == oneway
    assert [r.sigma for r in later[: len(oneway)]] == [planned[a] for a in oneway]
    later = later[len(oneway) :]
    selected = [r for r in later if r.kind == "select+measure"]
    rest = [r for r in later if r.kind == "measure"]
    # selection rounds come next, and each measured what its noise allowed
    assert later[: len(selected)] == selected
    for r in selected:
        if not r.final:  # (a final round is solved from what is left)
            # its noise term (what the fit keeps of the noise) within the filter's limit
            # (0.5·N̂, or N̂ after a precise one-way round), and below the raw noise
            assert r.selection is not None and r.selection.chosen_noise is not None
            limit = filter_factor(init, options) or 0.0
            assert 0.5 <= limit <= 1.0 and r.selection.chosen_noise <= limit * rows
            assert r.selection.chosen_noise < SQRT_2_OVER_PI * r.sigma * r.values.size
            # σ only falls by annealing: steps of √2 (anneal_factor) or 2 (free)
            ratio = 2.0 * math.log2(sigma1 / r.sigma)
            assert ratio == pytest.approx(round(ratio)) and ratio >= 0
    # what is left re-measures every one-way marginal, no selection; the last is final
    assert [r.attributes for r in rest] in ([], oneway)
    assert all(r.epsilon == 0 for r in rest)
    assert rounds[-1].final and not any(r.final for r in rounds[:-1])
    assert result.rho_used <= rho * (1 + 1e-12)
    assert result.rho_used == pytest.approx(rho, rel=1e-9)


def test_tiny_budget_spends_everything_on_oneway_marginals() -> None:
    """Where no multi-way marginal is ever measurable, AIM ends as a one-way mechanism."""
    domain, truth = _scarce_table(rows=100)
    rho = 1e-4
    options = MechanismOptions(
        init_share=0.5,
        noise_filter=0.1,
        precise_oneway_share=None,
        **FAST,  # type: ignore[arg-type]
    )
    workload = list(combinations(domain.attributes, 2))
    result = run_aim(domain, truth, rho, workload, options=options)
    assert all(r.kind == "measure" and len(r.attributes) == 1 for r in result.rounds)
    # the one-way round, its top-up and the rest, each over every attribute
    assert len(result.rounds) == 3 * len(domain.attributes)
    assert result.rho_used == pytest.approx(rho, rel=1e-9)


def test_resume_inside_the_topup_and_the_rest_draws_nothing_twice() -> None:
    domain, truth = _scarce_table(rows=300)
    rho = 0.02
    options = MechanismOptions(
        init_share=0.6,
        noise_filter=0.5,
        precise_oneway_share=None,
        **FAST,  # type: ignore[arg-type]
    )
    workload = list(combinations(domain.attributes, 2))
    full = run_aim(domain, truth, rho, workload, options=options)
    d = len(domain.attributes)
    crashes = [d + 2]  # inside the top-up
    if full.rounds[-1].kind == "measure":  # the run ended with the one-way rest
        crashes.append(len(full.rounds) - 3)
    for crash in crashes:
        stored = [r.to_dict() for r in full.rounds[:crash]]
        resumed = run_aim(domain, truth, rho, workload, options=options, completed_rounds=stored)
        for old, new in zip(full.rounds[:crash], resumed.rounds, strict=False):
            assert np.array_equal(old.values, new.values) and old.sigma == new.sigma
        kinds = [r.kind for r in resumed.rounds]
        assert kinds[: 2 * d] == ["measure"] * (2 * d)
        assert resumed.rounds[-1].final
        assert resumed.rho_used == pytest.approx(rho, rel=1e-9)


def test_paper_schedule_still_runs_as_before() -> None:
    truth = synthetic(2)
    options = MechanismOptions(**PAPER, **FAST)  # type: ignore[arg-type]
    result = run_aim(DOMAIN, truth, 0.3, ALL_PAIRS[:6], options=options)
    _, sigma0, _ = aim_schedule(DOMAIN, 0.3, options)
    assert all(r.sigma == sigma0 for r in result.rounds if r.kind == "measure")
    assert result.rho_used == pytest.approx(0.3, rel=1e-12)


def test_a_workload_with_triples_selects_with_its_own_share() -> None:
    """α is `measure_share_3way` (0.8) where a workload marginal has three or more
    attributes and `measure_share` (0.9) otherwise: a selection round of the same ρ then
    gets √2 times the ε. The paper's schedule, and a job stored without the key, keep α."""
    rho = 0.05
    default = MechanismOptions()
    assert (default.measure_share, default.measure_share_3way) == (0.9, 0.8)
    assert PAPER_SCHEDULE["measure_share_3way"] is None
    deep = ALL_PAIRS + list(combinations(DOMAIN.attributes, 3))
    assert run_options(ALL_PAIRS, default) is default
    assert run_options(deep, default).measure_share == 0.8
    assert run_options(deep, MechanismOptions(measure_share_3way=None)).measure_share == 0.9
    oneway = [(a,) for a in DOMAIN.attributes]
    _, sigma2, epsilon2 = initial_schedule(DOMAIN, rho, oneway, default)
    _, sigma3, epsilon3 = initial_schedule(DOMAIN, rho, oneway, run_options(deep, default))
    assert epsilon3 == pytest.approx(math.sqrt(2.0) * epsilon2, rel=1e-12)
    assert round_cost(sigma3, epsilon3) == pytest.approx(round_cost(sigma2, epsilon2), rel=1e-12)
    assert aim_schedule(DOMAIN, rho, default, deep)[2] == epsilon3
    assert aim_schedule(DOMAIN, rho, default, ALL_PAIRS)[2] == epsilon2


@pytest.mark.parametrize(("degrees", "selection_share"), [((2,), 0.1), ((2, 3), 0.2)])
def test_every_selection_round_of_a_run_spends_its_workloads_share_on_selecting(
    degrees: tuple[int, ...], selection_share: float
) -> None:
    """Annealing, free annealing and the last round all keep a round's split: ε²/8 is
    1 − α of every selection round's ρ, with α from the run's workload."""
    workload = [c for k in degrees for c in combinations(DOMAIN.attributes, k)]
    options = MechanismOptions(**FAST)  # type: ignore[arg-type]
    result = run_aim(DOMAIN, synthetic(3), 0.5, workload, options=options)
    selections = [r for r in result.rounds if r.kind == "select+measure"]
    assert selections
    for r in selections:
        assert (r.epsilon**2 / 8.0) / r.cost == pytest.approx(selection_share, rel=1e-9)
    assert result.rho_used == pytest.approx(0.5, rel=1e-9)


def test_options_refuse_shares_outside_zero_one() -> None:
    with pytest.raises(ValueError, match="init_share"):
        MechanismOptions(init_share=1.0)
    with pytest.raises(ValueError, match="noise_filter"):
        MechanismOptions(noise_filter=0.0)
    with pytest.raises(ValueError, match="fitted_noise"):
        MechanismOptions(fitted_noise="yes")  # type: ignore[arg-type]
    for bad in (0.0, 1.0, math.nan):
        with pytest.raises(ValueError, match="measure_share_3way"):
            MechanismOptions(measure_share_3way=bad)


def test_default_schedule_runs_four_rounds_per_attribute() -> None:
    """T = 4·d by default (`rounds_per_attribute`), so the first selection round costs
    (1 − β)·ρ / 4d (β = 0.2): four times what T = 16·d gives it; `rounds` overrides."""
    rho, d = 0.05, len(DOMAIN.attributes)
    default = MechanismOptions()
    rounds_t, _, _ = aim_schedule(DOMAIN, rho, default)
    assert rounds_t == 4 * d and default.init_share == 0.2
    oneway = [(a,) for a in DOMAIN.attributes]
    _, sigma, epsilon = initial_schedule(DOMAIN, rho, oneway, default)
    assert round_cost(sigma, epsilon) == pytest.approx(0.8 * rho / (4 * d), rel=1e-12)
    paper_t = MechanismOptions(rounds_per_attribute=16)
    _, sigma16, epsilon16 = initial_schedule(DOMAIN, rho, oneway, paper_t)
    assert aim_schedule(DOMAIN, rho, paper_t)[0] == 16 * d
    assert round_cost(sigma, epsilon) == pytest.approx(4 * round_cost(sigma16, epsilon16))
    assert aim_schedule(DOMAIN, rho, MechanismOptions(rounds=7))[0] == 7
    with pytest.raises(ValueError, match="rounds_per_attribute"):
        MechanismOptions(rounds_per_attribute=0)


def _steps(rounds: list[Round]) -> list[tuple[float, float, bool]]:
    """(σ ratio, ε ratio, annealed) between consecutive selection rounds before the last."""
    selects = [r for r in rounds if r.kind == "select+measure" and not r.final]
    return [
        (prev.sigma / cur.sigma, cur.epsilon / prev.epsilon, cur.annealed)
        for prev, cur in pairwise(selects)
    ]


@pytest.mark.parametrize("factor", [None, 2.0])
def test_annealing_steps_by_the_anneal_factor_and_free_annealing_halves(
    factor: float | None,
) -> None:
    """Once a measurement stops moving the model, σ falls by `anneal_factor` (√2 by
    default, the paper's 2) and ε rises by as much; the noise filter's free annealing,
    between two rounds, still halves σ. So between two rounds σ falls by step^a·2^b."""
    extra = {} if factor is None else {"anneal_factor": factor}
    options = MechanismOptions(**extra, **FAST)  # type: ignore[arg-type]
    step = options.anneal_factor
    assert step == (math.sqrt(2.0) if factor is None else factor)
    steps: list[tuple[float, float, bool]] = []
    for seed in range(4):
        result = run_aim(DOMAIN, synthetic(seed), 0.3, ALL_PAIRS, options=options)
        steps += _steps(result.rounds)
        assert result.rho_used == pytest.approx(0.3, rel=1e-9)
    annealed = [(s, e) for s, e, a in steps if a]
    assert all(s == 1.0 and e == 1.0 for s, e, a in steps if not a)
    assert annealed, "no run annealed: the test table no longer exercises annealing"
    for sigma_ratio, epsilon_ratio in annealed:
        assert epsilon_ratio == pytest.approx(sigma_ratio, rel=1e-12)
        halvings = math.log2(sigma_ratio)
        data_step = halvings - math.floor(halvings + 1e-9)  # what is left after the 2s
        assert data_step == pytest.approx(0.0, abs=1e-9) or (
            2.0**data_step == pytest.approx(step, rel=1e-9)
        )
    if factor is None:  # the default's √2 step was taken (a paper run only halves)
        assert any(s == pytest.approx(math.sqrt(2.0), rel=1e-12) for s, _ in annealed)


def test_options_refuse_an_anneal_factor_that_does_not_lower_sigma() -> None:
    for bad in (1.0, 0.5, math.inf, math.nan):
        with pytest.raises(ValueError, match="anneal_factor"):
            MechanismOptions(anneal_factor=bad)


def test_the_noise_filters_free_annealing_halves_sigma() -> None:
    """Where nothing multi-way passes the noise filter at the first selection's σ, σ is
    halved (not divided by `anneal_factor`) until something does, before any access."""
    domain, truth = _scarce_table(rows=1000)
    rho = 0.05
    # (the limit as set: not widened, whatever the one-way round's noise share)
    options = MechanismOptions(noise_filter=0.15, wide_filter_share=None, **FAST)  # type: ignore[arg-type]
    oneway = [(a,) for a in domain.attributes]
    _, sigma1, epsilon1 = initial_schedule(domain, rho, oneway, options)
    result = run_aim(domain, truth, rho, list(combinations(domain.attributes, 2)), options=options)
    first = next(r for r in result.rounds if r.kind == "select+measure")
    assert not first.final and first.annealed
    assert first.sigma == sigma1 / 2.0 and first.epsilon == epsilon1 * 2.0
