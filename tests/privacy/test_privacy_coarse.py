"""Coarse candidates: a pair's values merged into runs, offered where the full pair is
too noisy, measured and fitted as a linear query, stored and resumed."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from app.pgm.domain import Domain
from app.privacy.mechanisms import MechanismOptions, run_aim
from app.privacy.mechanisms import engine as engine_module
from app.privacy.mechanisms.aim import PAPER_SCHEDULE, form_groups
from app.privacy.mechanisms.coarse import (
    Coarse,
    coarse_form,
    with_coarse_forms,
    without_needless_forms,
)
from app.privacy.mechanisms.rounds import Round, RoundsMismatch, check_replayed
from tests.privacy.privacy_fixtures import FAST

DOMAIN = Domain(("h", "u", "v", "b"), (3, 9, 8, 2))
RHO = 0.02  # on 400 rows: the pairs of h with u and v are too noisy in full, not in form


def _hub_table(rows: int = 400, seed: int = 5):  # type: ignore[no-untyped-def]
    """Few rows; u and v follow h in runs of neighbouring values, b follows h."""
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 3, rows)
    u = np.clip(3 * h + rng.integers(0, 3, rows), 0, 8)
    v = np.clip(3 * h + rng.integers(-1, 2, rows), 0, 7)
    b = (h > 0).astype(int) ^ (rng.random(rows) < 0.1)
    data = np.stack([h, u, v, b], axis=1)

    def truth(attrs: tuple[str, ...]) -> np.ndarray:
        idx = [DOMAIN.index(a) for a in attrs]
        flat = np.ravel_multi_index(tuple(data[:, i] for i in idx), DOMAIN.shape(attrs))
        return np.bincount(flat, minlength=DOMAIN.cells(attrs))

    return truth


def test_groups_are_runs_of_consecutive_codes_and_the_query_sums_them() -> None:
    form = Coarse(("x", "y"), (9, 8), (3, 3))
    assert form.ranges() == [[(0, 2), (3, 5), (6, 8)], [(0, 2), (3, 5), (6, 7)]]
    assert form.cells == 9 and len(form) == 2
    counts = np.arange(72)
    table = counts.reshape(9, 8)
    expected = [
        table[a:b, c:d].sum()
        for a, b in [(0, 3), (3, 6), (6, 9)]
        for c, d in [(0, 3), (3, 6), (6, 8)]
    ]
    assert form.project(counts).tolist() == expected
    assert np.array_equal(form.query @ counts, form.project(counts))
    assert form.project(counts).dtype.kind == "i"  # counts stay integer for the noise
    assert Coarse.from_dict(("x", "y"), form.to_dict()) == form
    with pytest.raises(ValueError, match="between 1 and"):
        Coarse(("x",), (2,), (3,))


def test_a_form_keeps_the_small_attribute_whole_and_merges_the_other() -> None:
    assert coarse_form(DOMAIN, ("h", "u"), 3) == Coarse(("h", "u"), (3, 9), (3, 3))
    assert coarse_form(DOMAIN, ("b", "v"), 3) == Coarse(("b", "v"), (2, 8), (2, 3))
    assert coarse_form(DOMAIN, ("u", "v"), 3) is None  # both large: no form
    assert coarse_form(DOMAIN, ("h", "b"), 3) is None  # nothing to merge
    assert coarse_form(DOMAIN, ("h", "u", "b"), 3) is None  # pairs only
    candidates = [("u",), ("h", "u"), ("u", "v"), ("h", "u", "b")]
    weights = {r: float(len(r)) for r in candidates}
    offered, offered_weights = with_coarse_forms(DOMAIN, candidates, weights, 3)
    forms = [r for r in offered if isinstance(r, Coarse)]
    assert [f.attributes for f in forms] == [("h", "u")]
    assert offered_weights[forms[0]] == weights[("h", "u")]
    assert with_coarse_forms(DOMAIN, candidates, weights, None)[0] == candidates
    # a form is dropped where its pair passed in full, kept where it did not
    assert without_needless_forms([("h", "u"), *forms]) == [("h", "u")]
    assert without_needless_forms([("u", "v"), *forms]) == [("u", "v"), *forms]


def test_a_coarse_round_stores_its_groups_and_fits_as_a_query() -> None:
    form = Coarse(("x", "y"), (9, 8), (3, 3))
    values = np.arange(9)
    stored = Round(0, "measure", ("x", "y"), 4.0, 0.0, 1 / 32, values, coarse=form)
    again = Round.from_dict(stored.to_dict())
    assert again.coarse == form and np.array_equal(again.values, values)
    measurement = again.measurement()
    assert measurement.query is not None and measurement.query.shape == (9, 72)
    # a round over other groups than its values is refused on resume
    wrong = Round(0, "measure", ("x", "y"), 4.0, 0.0, 1 / 32, np.arange(8), coarse=form)
    with pytest.raises(RoundsMismatch, match="other groups"):
        check_replayed([wrong])
    # an ordinary round's stored form has no "coarse" key at all
    plain = Round(0, "measure", ("x",), 4.0, 0.0, 1 / 32, np.arange(9))
    assert "coarse" not in plain.to_dict()


def _run(truth, **options):  # type: ignore[no-untyped-def]
    workload = list(combinations(DOMAIN.attributes, 2))
    chosen = MechanismOptions(**(FAST | options))  # type: ignore[arg-type]
    return run_aim(DOMAIN, truth, RHO, workload, options=chosen), workload, chosen


def test_aim_measures_coarse_forms_only_of_pairs_too_noisy_in_full() -> None:
    truth = _hub_table()
    forms = []
    for _ in range(3):  # (each run draws its own noise; one with a form suffices)
        result, _, _ = _run(truth)
        forms = [r for r in result.rounds if r.coarse is not None]
        if forms:
            break
    assert forms, "no run measured a coarse form"
    for r in forms:
        assert r.kind == "select+measure" and len(r.attributes) == 2
        assert r.coarse == coarse_form(DOMAIN, r.attributes, 3)
        assert r.values.size == r.coarse.cells
        # scored on its groups: its error before is over the groups' counts
        assert r.estimate_before is not None and r.estimate_before.size == r.coarse.cells
    # a coarse form never covers its pair for Theorem 2: a bound is only for full pairs
    full = {r.attributes for r in result.rounds if r.coarse is None}
    assert all(b.attributes not in full for b in result.unmeasured_bounds.values())
    assert result.rho_used == pytest.approx(RHO, rel=1e-9)


# with every pair, (h, b) and the pairs with b are measurable in full; without b only
# the forms of (h, u) and (h, v) are measurable at first
@pytest.mark.parametrize(
    ("workload", "rho"),
    [(list(combinations(DOMAIN.attributes, 2)), RHO), ([("h", "u"), ("h", "v"), ("u", "v")], 0.01)],
)
def test_a_round_offers_forms_only_beside_a_full_pair_and_never_beside_their_own(
    workload: list[tuple[str, ...]], rho: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A form never makes a round run: without a full marginal of two or more
    attributes to measure, σ anneals for free as before."""
    offered: list[list[object]] = []
    real = engine_module.MechanismRun.select

    def spy(self, candidates, *args):  # type: ignore[no-untyped-def]
        offered.append(list(candidates))
        return real(self, candidates, *args)

    monkeypatch.setattr(engine_module.MechanismRun, "select", spy)
    options = MechanismOptions(**FAST)  # type: ignore[arg-type]
    for _ in range(3):
        run_aim(DOMAIN, _hub_table(), rho, workload, options=options)
    if len(workload) > 3:  # every pair: some rounds offer forms beside full pairs
        assert any(isinstance(r, Coarse) for candidates in offered for r in candidates)
    for candidates in offered:
        forms = [r for r in candidates if isinstance(r, Coarse)]
        full = [r for r in candidates if not isinstance(r, Coarse)]
        assert not forms or any(len(r) > 1 for r in full)
        assert all(f.attributes not in full for f in forms)


def test_forms_only_where_rows_are_few_for_the_budget() -> None:
    """Forms come with the one-way top-up (the one-way round's noise a large share of
    N̂); on a large table a pair the filter leaves out at first is measured in full later."""
    workload = list(combinations(DOMAIN.attributes, 2))
    options = MechanismOptions(**FAST)  # type: ignore[arg-type]
    d = len(DOMAIN.attributes)
    for rows, expected in ((400, 3), (40_000, None)):
        result = run_aim(DOMAIN, _hub_table(rows), RHO, workload, options=options)
        assert form_groups(DOMAIN, RHO, result.rounds[:d], options) == expected
        if expected is None:
            assert all(r.coarse is None for r in result.rounds)


def test_without_coarse_groups_no_form_is_offered() -> None:
    truth = _hub_table()
    result, _, _ = _run(truth, coarse_groups=None)
    assert all(r.coarse is None for r in result.rounds)
    assert PAPER_SCHEDULE["coarse_groups"] is None  # a job stored before it resumes without


def test_a_run_with_coarse_rounds_resumes_without_drawing_them_again() -> None:
    truth = _hub_table()
    for _ in range(3):
        full, workload, options = _run(truth)
        coarse = [r.index for r in full.rounds if r.coarse is not None]
        if coarse:
            break
    assert coarse, "no run measured a coarse form"
    crash = coarse[0] + 1
    stored = [r.to_dict() for r in full.rounds[:crash]]
    resumed = run_aim(DOMAIN, truth, RHO, workload, options=options, completed_rounds=stored)
    for old, new in zip(full.rounds[:crash], resumed.rounds, strict=False):
        assert np.array_equal(old.values, new.values) and old.coarse == new.coarse
    assert resumed.rho_used == pytest.approx(RHO, rel=1e-9)
    # stored groups AIM would not offer (another G) are not this run's
    other = dict(stored[coarse[0]])
    sizes = [DOMAIN.size_of(a) for a in other["attributes"]]
    wrong = [2 if n > 2 else n for n in sizes]  # other runs than AIM's 3
    cells = int(np.prod(wrong))
    other |= {"coarse": {"sizes": sizes, "groups": wrong}, "values": [0] * cells}
    bad = [*stored[: coarse[0]], other]
    with pytest.raises(RoundsMismatch, match="not a coarse form AIM offers"):
        run_aim(DOMAIN, truth, RHO, workload, options=options, completed_rounds=bad)


@pytest.mark.parametrize("groups", [1, 0, True, 2.5])
def test_options_refuse_coarse_groups_below_two_or_not_whole(groups: object) -> None:
    with pytest.raises(ValueError, match="coarse_groups"):
        MechanismOptions(coarse_groups=groups)  # type: ignore[arg-type]


def test_a_forms_noise_term_is_its_own_fitted_noise_over_its_groups() -> None:
    """All forms of a round take their terms from one call over a domain of the groups:
    each equals the term of that form alone. Forms that disagree on an attribute's groups
    are refused rather than scored on the wrong ones."""
    from app.privacy.mechanisms.engine import MechanismRun
    from app.privacy.mechanisms.filtering import noise_terms
    from app.privacy.mechanisms.fitted_noise import fitted_noise

    run = MechanismRun("t", DOMAIN, _hub_table(), RHO, {("h", "u"): 1.0})
    hu, hv = (coarse_form(DOMAIN, pair, 3) for pair in (("h", "u"), ("h", "v")))
    assert hu is not None and hv is not None
    terms = noise_terms(run, [("h", "b"), hu, hv], 15.0, MechanismOptions())
    for form in (hu, hv):
        alone = fitted_noise(
            Domain(form.attributes, form.groups), {form.attributes: run.estimate_of(form)}, 15.0
        )
        assert terms[form] == pytest.approx(alone[form.attributes], rel=1e-12)
    assert terms[("h", "b")] > 0.0
    with pytest.raises(ValueError, match="u into different groups"):
        noise_terms(run, [hu, Coarse(("u", "b"), (9, 2), (4, 2))], 15.0, MechanismOptions())
