"""AIM's one-way round in two halves (`precise_oneway_share`): where the first half leaves
the one-way marginals precise, the second half's ρ goes to the selection rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.privacy.mechanisms import MechanismOptions, run_aim
from app.privacy.mechanisms.aim import (
    PAPER_SCHEDULE,
    initial_schedule,
    selection_start,
    split_oneway,
)
from app.privacy.mechanisms.budget import round_cost
from app.privacy.mechanisms.oneway import (
    filter_factor,
    oneway_noise_share,
    second_half_due,
    topup_sigmas,
)
from app.privacy.mechanisms.rounds import Round
from app.services.mechanisms import stored_schedule
from tests.privacy.privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic
from tests.privacy.test_privacy_aim_determinism import same_rounds, seeded_samplers

RHO = 0.05
ONEWAY = [(a,) for a in DOMAIN.attributes]
D = len(ONEWAY)


def _options(**overrides: object) -> MechanismOptions:
    return MechanismOptions(**(FAST | overrides))  # type: ignore[arg-type]


def _measured(attrs: tuple[str, ...], total: float, sigma: float) -> Round:
    """A one-way round's released marginal: `total` rows spread evenly over its cells."""
    cells = DOMAIN.cells(attrs)
    values = np.full(cells, total / cells)
    return Round(0, "measure", attrs, sigma, 0.0, round_cost(sigma, 0.0), values)


def test_each_half_spends_half_the_oneway_share_split_as_one_round_is() -> None:
    whole = _options(precise_oneway_share=None)
    halves = _options()
    assert split_oneway(halves) and not split_oneway(whole)
    one, sigma, epsilon = initial_schedule(DOMAIN, RHO, ONEWAY, whole)
    half, sigma_h, epsilon_h = initial_schedule(DOMAIN, RHO, ONEWAY, halves)
    # a half costs half of β·ρ, in the same n^(2/3) proportions: σ √2 times the round's
    assert math.fsum(round_cost(s, 0.0) for s in half.values()) == pytest.approx(0.1 * RHO)
    for r in ONEWAY:
        assert half[r] == pytest.approx(math.sqrt(2.0) * one[r], rel=1e-12)
    # both halves measured: the first selection round starts where one round's does
    assert (sigma_h, epsilon_h) == (sigma, epsilon)
    # the second half skipped: (1 − β/2)·ρ / T
    start_sigma, start_epsilon = selection_start(DOMAIN, RHO, halves, 0.1)
    rounds_t = 4 * D
    cost = round_cost(start_sigma, start_epsilon)
    assert cost == pytest.approx(0.9 * RHO / rounds_t, rel=1e-12)
    assert start_sigma < sigma and start_epsilon > epsilon


def test_two_halves_have_the_noise_share_of_one_round_of_their_sum() -> None:
    """s, and so the top-up, the filter's width and the coarse forms, is the same after
    both halves as after one round of β·ρ: the fit sees the same information."""
    whole = _options(precise_oneway_share=None)
    one, _, _ = initial_schedule(DOMAIN, RHO, ONEWAY, whole)
    for rows in (300.0, 20_000.0):
        single = [_measured(r, rows, one[r]) for r in ONEWAY]
        both = [_measured(r, rows, math.sqrt(2.0) * one[r]) for r in ONEWAY] * 2
        assert oneway_noise_share(both) == pytest.approx(oneway_noise_share(single), rel=1e-9)
        assert filter_factor(both, whole) == pytest.approx(filter_factor(single, whole))
        topped, planned = (
            topup_sigmas(DOMAIN, RHO, both, whole),
            topup_sigmas(DOMAIN, RHO, single, whole),
        )
        assert topped.keys() == planned.keys()
        for r, s in planned.items():
            assert topped[r] == pytest.approx(s, rel=1e-9)
    # a first half alone: √2 times one round's noise share
    first = [_measured(r, 300.0, math.sqrt(2.0) * one[r]) for r in ONEWAY]
    single = [_measured(r, 300.0, one[r]) for r in ONEWAY]
    assert oneway_noise_share(first) == pytest.approx(
        math.sqrt(2.0) * oneway_noise_share(single), rel=1e-9
    )


def test_the_second_half_is_due_while_the_first_leaves_a_noise_share_above_the_limit() -> None:
    """Decided from the first half's released totals (N̂) and public sizes only."""
    options = _options(precise_oneway_share=0.01)
    half, _, _ = initial_schedule(DOMAIN, RHO, ONEWAY, options)
    share_at_one_row = oneway_noise_share([_measured(r, 1.0, half[r]) for r in ONEWAY])
    edge = share_at_one_row / 0.01  # s ∝ 1/N̂: the rows at which s is the limit
    for rows, due in ((0.5 * edge, True), (0.99 * edge, True), (1.01 * edge, False)):
        first = [_measured(r, rows, half[r]) for r in ONEWAY]
        assert second_half_due(first, options) is due
    # without the option the round is one piece, and nothing is skipped
    assert second_half_due(
        [_measured(r, 1e9, half[r]) for r in ONEWAY], _options(precise_oneway_share=None)
    )


def test_a_large_table_measures_the_first_half_only_and_selects_with_the_rest() -> None:
    options = _options()
    result = run_aim(DOMAIN, synthetic(5, 20_000), RHO, ALL_PAIRS, options=options)
    half, _, _ = initial_schedule(DOMAIN, RHO, ONEWAY, options)
    rounds = result.rounds
    first, later = rounds[:D], rounds[D:]
    assert [r.attributes for r in first] == ONEWAY
    assert [r.sigma for r in first] == [half[r] for r in ONEWAY]
    assert not second_half_due(first, options)
    # no second half, no top-up: selection rounds come next, at (1 − β/2)·ρ / T
    assert later[0].kind == "select+measure"
    assert (later[0].sigma, later[0].epsilon) == selection_start(DOMAIN, RHO, options, 0.1)
    assert math.fsum(r.rho for r in first) == pytest.approx(0.1 * RHO, rel=1e-12)
    assert result.rho_used == pytest.approx(RHO, rel=1e-9)


def test_a_small_table_measures_both_halves_before_any_selection() -> None:
    options = _options()
    result = run_aim(DOMAIN, synthetic(5, 300), RHO, ALL_PAIRS, options=options)
    _, sigma, epsilon = initial_schedule(DOMAIN, RHO, ONEWAY, options)
    half, _, _ = initial_schedule(DOMAIN, RHO, ONEWAY, options)
    rounds = result.rounds
    assert second_half_due(rounds[:D], options)
    both = rounds[: 2 * D]
    assert [r.attributes for r in both] == ONEWAY * 2
    assert [r.sigma for r in both] == [half[r] for r in ONEWAY] * 2
    assert math.fsum(r.rho for r in both) == pytest.approx(0.2 * RHO, rel=1e-12)
    # what follows (a top-up where one is due) is decided from both halves
    planned = topup_sigmas(DOMAIN, RHO, both, options)
    after = rounds[2 * D : 2 * D + len(planned)]
    assert [r.sigma for r in after] == [planned[r.attributes] for r in after]
    selections = [r for r in rounds if r.kind == "select+measure"]
    if selections and not selections[0].final and not selections[0].annealed:
        assert (selections[0].sigma, selections[0].epsilon) == (sigma, epsilon)
    assert result.rho_used == pytest.approx(RHO, rel=1e-9)


@pytest.mark.parametrize(("rows", "crash"), [(300, D + 2), (20_000, D), (20_000, D - 1)])
def test_resume_inside_or_after_the_halves_draws_nothing_twice(rows: int, crash: int) -> None:
    options = _options()
    truth = synthetic(6, rows)
    full = run_aim(DOMAIN, truth, RHO, ALL_PAIRS, options=options)
    stored = [r.to_dict() for r in full.rounds[:crash]]
    resumed = run_aim(DOMAIN, truth, RHO, ALL_PAIRS, options=options, completed_rounds=stored)
    for old, new in zip(full.rounds[:crash], resumed.rounds, strict=False):
        assert np.array_equal(old.values, new.values) and old.sigma == new.sigma
    # the same layout: both halves on the small table, the first alone on the large one
    halves = 2 if rows == 300 else 1
    assert [r.kind for r in resumed.rounds[: halves * D]] == ["measure"] * (halves * D)
    assert resumed.rounds[halves * D].kind != "measure" or halves == 2
    assert resumed.rounds[-1].final
    assert resumed.rho_used == pytest.approx(RHO, rel=1e-9)


def test_a_job_stored_without_the_option_keeps_its_oneway_round_in_one_piece() -> None:
    assert PAPER_SCHEDULE["precise_oneway_share"] is None
    schedule = stored_schedule({"schedule": {"init_share": 0.2, "noise_filter": 0.5}})
    assert schedule["precise_oneway_share"] is None
    assert not split_oneway(MechanismOptions(**schedule))


@pytest.mark.parametrize("value", [0.0, -0.01, math.inf, math.nan])
def test_options_refuse_a_precise_share_that_is_not_a_positive_number(value: float) -> None:
    with pytest.raises(ValueError, match="precise_oneway_share"):
        MechanismOptions(precise_oneway_share=value)


@pytest.mark.parametrize(("rows", "halves"), [(300, 2), (20_000, 1)])
def test_the_same_seed_makes_the_same_halves_decision(
    rows: int, halves: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With OpenDP's samplers replaced by a seeded stand-in, two runs are the same run:
    the second half (and everything after it) follows from the same released totals."""
    runs = []
    for _ in range(2):
        seeded_samplers(monkeypatch, 7)
        runs.append(run_aim(DOMAIN, synthetic(5, rows), RHO, ALL_PAIRS, options=_options()))
    first, again = runs
    assert same_rounds(first.rounds, again.rounds)
    kinds = [r.kind for r in first.rounds]
    assert kinds[: halves * D] == ["measure"] * (halves * D)
    assert second_half_due(first.rounds[:D], _options()) is (halves == 2)
