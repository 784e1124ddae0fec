"""AIM: the adaptive and iterative mechanism (McKenna, Mullins, Sheldon, Miklau, VLDB 2022).

Algorithms 1–4 of the paper, on our OpenDP noise and app.pgm estimation:

- Candidates are the downward closure W⁺ of the workload, weighted by their overlap
  with it, w_r = Σ_{s∈W} c_s·|r ∩ s|.
- Initialisation: every one-way marginal of W⁺ is measured with σ₀, where T = 16·d
  (d = number of attributes of the domain), α = 0.9 and
  σ₀ = √(T / (2αρ)), ε₀ = √(8(1 − α)ρ / T); the model is then fitted.
- Each round: if what would be left after a round at the current (σ, ε) is below one
  round's cost, this round is the last and spends exactly the rest (σ, ε solved from
  it with the α/1−α split). Candidates are filtered to those whose junction tree,
  added to the measured sets, stays within (ρ_used/ρ)·max_model_cells cells (ρ_used
  including this round; the paper's size-vs-budget filter), and never above
  max_model_cells. The exponential mechanism (ε, sensitivity max w_r) picks r with
  quality q_r = w_r(‖M_r(D) − M_r(p̂)‖₁ − √(2/π)·σ·n_r); r is measured with discrete
  Gaussian noise σ; the model is refitted (warm start).
- Annealing: if ‖M_r(p̂_t) − M_r(p̂_{t−1})‖₁ ≤ √(2/π)·σ·n_r the model no longer learns
  at this noise level: σ ← σ/2, ε ← 2ε.

privq's schedule (the defaults; `PAPER_SCHEDULE` gives the paper's):

- T = 4·d rounds at most (`options.rounds_per_attribute`; the paper's 16·d), so a
  selection round starts at four times the paper's ρ: its exponential mechanism (ε
  twice the paper's) tells candidates apart at half the rows, and annealing has fewer
  steps to make.
- Annealing divides σ by √2 and multiplies ε by √2 (`options.anneal_factor`; the
  paper's 2), so a round after it costs twice the last instead of four times: where
  the model stops learning at one noise level, the next rounds measure more marginals
  at a noise level between the two (docs/mechanisms.md has the figures).
- Where the workload holds a marginal of three or more attributes, a round's α is
  `options.measure_share_3way` (0.8) instead of `options.measure_share` (0.9): ε √2
  times larger for each selection among the many more candidates (`run_options`).
- No candidate weighs more than the heaviest pair (`options.pair_weight_cap`,
  `workload.capped_weights`): with 3-way marginals in the workload the triples' w_r
  would otherwise set the exponential mechanism's sensitivity, and every selection
  among pairs would be as noisy as if it were among triples.
- The one-way round spends β·ρ (`options.init_share`, 0.2), split over the one-way
  marginals in proportion to n_i^(2/3); selection rounds start at (1 − β)·ρ/T. It is
  measured in two halves of β/2·ρ (`options.precise_oneway_share`), and where the
  first half's noise share (below) is at most that, the second is not measured and the
  selection rounds start at (1 − β/2)·ρ/T (`oneway.second_half_due`); what follows
  reads both halves as one round.
- N̂, the rows the one-way round implies (its noisy totals, inverse-variance weighted:
  post-processing), decides the rest for free. If the one-way round's noise is a large
  share of N̂, a one-way top-up round follows (`topup_sigmas`). A selection round only
  offers candidates whose noise term η_r (below), plus what the exponential
  mechanism may miss by, is at most `options.noise_filter`·N̂ (twice that while the
  one-way round's noise share is at most `options.wide_filter_share`, narrowing back
  over the next `options.wide_filter_ramp` of it: `filter_factor`);
  while no candidate of two or more attributes passes, σ is halved
  (`FREE_ANNEAL_FACTOR`) before the round's access (nothing read).
  The last selection round costs an ordinary round (the paper's final round only
  within half a round of the end) and what is left re-measures every one-way marginal
  (n^(2/3) split, no selection; "measure" rounds, the last one final); so does all of
  it if free annealing reaches the end of the budget.
- The noise term of a candidate's quality, η_r in w_r(‖M_r(D) − M_r(p̂)‖₁ − η_r), is
  the noise the fit keeps of a measurement at σ (`fitted_noise`: the part the one-way
  marginals do not fix, clipped at zero counts around the model's answer), not the raw
  √(2/π)·σ·n_r, which overstates it where the model puts few rows in many cells
  (`options.fitted_noise`; docs/mechanisms.md has the figures). Its inputs are the
  model and σ, so it is fixed before the round reads anything.
- Where the one-way round asks for a top-up (`form_groups`), a pair whose full marginal
  the noise filter leaves out, of one attribute with at most `options.coarse_groups`
  (G = 3) values and one with more, is offered in coarse form
  (`coarse`): the small attribute's values against G runs of the other's consecutive
  values, a linear query with the pair's sensitivity and weight. Forms join the
  candidates of a round that some full multi-way candidate lets run; they never make a
  round run on their own, so where nothing is measurable in full σ still anneals for
  free as before.

With privacy units of at most k rows (`options.sensitivity`), every marginal has
sensitivity k: each σ above is k times as large for the same ρ, ε is unchanged, and
the exponential mechanism's sensitivity is k·max w_r.

The run is resumable (see `engine`): stored rounds are replayed (no noise drawn), the
ρ of rounds that ran but were lost before they were stored is taken as spent, the
one-way initialisation (its top-up, the one-way rest) is finished if it was interrupted, and the
annealing decision after the last stored round is recomputed from the refitted model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Unpack

import numpy as np

from app.pgm.domain import Domain
from app.privacy.mechanisms.bounds import SQRT_2_OVER_PI
from app.privacy.mechanisms.budget import round_cost, split_round
from app.privacy.mechanisms.coarse import (
    Coarse,
    coarse_form,
    with_coarse_forms,
    without_needless_forms,
)
from app.privacy.mechanisms.engine import (
    MechanismResult,
    MechanismRun,
    RunArguments,
    TrueMarginal,
)
from app.privacy.mechanisms.filtering import noise_filter, noise_terms
from app.privacy.mechanisms.oneway import (
    estimated_rows,
    filter_factor,
    form_groups,
    measure_sigma,
    oneway_parts,
    second_half_due,
    topup_sigmas,
)
from app.privacy.mechanisms.options import MechanismOptions
from app.privacy.mechanisms.rounds import Attrs, Round, RoundsMismatch
from app.privacy.mechanisms.workload import (
    candidate_weights,
    capped_weights,
    normalise_workload,
    size_filter,
)

NAME = "aim"

# The paper's schedule as MechanismOptions fields: no one-way share of its own, no noise
# filter, T = 16·d (what a job stored without a schedule of its own resumes with; a key
# missing from a stored schedule takes its value here, the default when it was stored).
PAPER_SCHEDULE: dict[str, float | bool | None] = {
    "init_share": None,
    "noise_filter": None,
    "rounds_per_attribute": 16,
    "anneal_factor": 2.0,
    "wide_filter_share": None,
    "wide_filter_ramp": 0.0,
    "precise_oneway_share": None,
    "fitted_noise": False,
    "coarse_groups": None,
    "measure_share_3way": None,
    "pair_weight_cap": False,
}

# The noise filter's own annealing, before any access while nothing multi-way passes it,
# halves σ whatever `options.anneal_factor` is: it looks for a noise level at which a
# marginal is measurable at all, and a step of 2 keeps a round that the budget can only
# just afford (and that would measure one marginal at the edge of usefulness) from
# replacing the one-way rest. (On 944 rows at ε = 0.1, a √2 step here cost 3%.)
FREE_ANNEAL_FACTOR = 2.0


def _paper_schedule(
    domain: Domain, rho: float, options: MechanismOptions
) -> tuple[int, float, float]:
    """(T, σ₀, ε₀): T = `options.rounds_per_attribute`·d (the paper's 16·d) unless
    `options.rounds` says otherwise, ρ/T a round."""
    rounds = options.rounds or options.rounds_per_attribute * len(domain)
    sigma0, epsilon0 = split_round(rho / rounds, options.measure_share, options.sensitivity)
    return rounds, sigma0, epsilon0


def run_options(workload: Iterable[Sequence[str]], options: MechanismOptions) -> MechanismOptions:
    """The options a run over `workload` uses: α is `options.measure_share_3way` where a
    workload marginal has three or more attributes (the workload is public)."""
    share = options.measure_share_3way
    if share is None or max((len(w) for w in workload), default=0) < 3:
        return options
    return replace(options, measure_share=share)


def aim_schedule(
    domain: Domain,
    rho: float,
    options: MechanismOptions,
    workload: Iterable[Sequence[str]] | None = None,
) -> tuple[int, float, float]:
    """(T, σ, ε) of a run over `workload` (None: as if of pairs): T its rounds at most
    (see `_paper_schedule`), ε its first selection's, σ the largest noise it measures a
    marginal at: the one-way round's (of every attribute) and the first selection round's
    (annealing only lowers σ; the one-way rest re-measures marginals the one-way round
    measured already)."""
    if workload is not None:
        options = run_options(workload, options)
    oneway = [(a,) for a in domain.attributes]
    sigmas, sigma, epsilon = initial_schedule(domain, rho, oneway, options)
    rounds = _paper_schedule(domain, rho, options)[0]
    return rounds, max(sigma, *sigmas.values()), epsilon


def split_oneway(options: MechanismOptions) -> bool:
    """Whether the one-way round is measured in two halves (`options.precise_oneway_share`)."""
    return options.init_share is not None and options.precise_oneway_share is not None


def initial_schedule(
    domain: Domain, rho: float, oneway: Sequence[Attrs], options: MechanismOptions
) -> tuple[dict[Attrs, float], float, float]:
    """({one-way marginal: its σ}, σ and ε of the first selection round).

    With `options.init_share` β the one-way round spends β·ρ, split over the one-way
    marginals in proportion to n_i^(2/3) (n_i: the attribute's values; the split that
    minimises the expected L1 error Σ n_i·σ_i of the round, since an attribute's error
    grows with its cells), and the first selection round gets (1 − β)·ρ / T. With None
    both follow the paper: σ₀ for every one-way marginal, ρ/T a round, α of it measuring.
    Measured in two halves (`split_oneway`), each marginal's σ is its half's (β/2·ρ
    split the same way); `selection_start` gives the first selection round where the
    second half is not measured.
    """
    _, sigma0, epsilon0 = _paper_schedule(domain, rho, options)
    if options.init_share is None:
        return {r: sigma0 for r in oneway}, sigma0, epsilon0
    share = options.init_share / 2.0 if split_oneway(options) else options.init_share
    sigmas = {
        r: measure_sigma(share * rho * part, options.sensitivity)
        for r, part in zip(oneway, oneway_parts(domain, oneway), strict=True)
    }
    return sigmas, *selection_start(domain, rho, options, options.init_share)


def selection_start(
    domain: Domain, rho: float, options: MechanismOptions, spent: float
) -> tuple[float, float]:
    """(σ, ε) of the first selection round once the one-way round spent `spent`·ρ:
    (1 − spent)·ρ / T, α of it measuring."""
    rounds = _paper_schedule(domain, rho, options)[0]
    return split_round((1.0 - spent) * rho / rounds, options.measure_share, options.sensitivity)


def _anneal(run: MechanismRun, last: Round) -> bool:
    """AIM's test: did measuring `last` move the model's answer by less than the noise?"""
    if last.estimate_before is None:
        raise RoundsMismatch(f"round {last.index} has no estimate before it: cannot anneal")
    after = run.estimate(last.attributes)
    if last.coarse is not None:
        after = last.coarse.project(after)
    change = float(np.abs(after - last.estimate_before).sum())
    return change <= SQRT_2_OVER_PI * last.sigma * last.values.size


def run_aim(
    domain: Domain,
    true_marginal: TrueMarginal,
    rho: float,
    workload: Iterable[Sequence[str] | tuple[Sequence[str], float]],
    **arguments: Unpack[RunArguments],
) -> MechanismResult:
    """Run (or resume) AIM with total budget `rho` (zCDP) over `workload`.

    `true_marginal(attrs)` returns the exact count marginal over `attrs` (domain order),
    any shape with that many cells. `base_measurements` (the dataset's earlier releases)
    and `warm_start` only inform the fits and selections (post-processing, no cost).
    Returns the mechanism's own measurements, the fitted model, the rounds and Theorem 4
    bounds; the ρ spent equals `rho` up to float rounding and never exceeds it.
    `arguments` are `RunArguments`: options, completed_rounds (to resume), on_round,
    on_progress, base_measurements, warm_start.
    """
    normalised = normalise_workload(domain, workload)
    options = run_options(normalised, arguments.get("options") or MechanismOptions())
    arguments["options"] = options
    weights = candidate_weights(domain, normalised)
    if options.pair_weight_cap:
        weights = capped_weights(weights)
    oneway: list[Attrs] = [r for r in weights if len(r) == 1]
    rounds_t = aim_schedule(domain, rho, options)[0]
    alpha = options.measure_share
    if rounds_t <= len(oneway):
        # the one-way initialisation alone would cost α·d'/T·ρ ≥ αρ, leaving no rounds
        raise ValueError(
            f"AIM needs more rounds (T = {rounds_t}) than one-way marginals ({len(oneway)})"
        )
    init_sigmas, sigma0, epsilon0 = initial_schedule(domain, rho, oneway, options)
    run = MechanismRun(NAME, domain, true_marginal, rho, normalised, **arguments)

    rest_start: list[int] = []  # index of the first round of the one-way rest, if any
    d1 = len(oneway)
    halves = split_oneway(options)

    def second() -> bool:
        """Whether the one-way round's second half is measured (after its first)."""
        return halves and second_half_due(run.rounds[:d1], options)

    def d0() -> int:
        """Rounds of the one-way round: one or both of its halves."""
        return 2 * d1 if second() else d1

    def topup() -> dict[Attrs, float]:
        return topup_sigmas(domain, rho, run.rounds[: d0()], options)

    def check(index: int, r: Round) -> None:
        if index < d1 or (index < 2 * d1 and second()):
            if (
                r.kind != "measure"
                or r.attributes != oneway[index % d1]
                or r.sigma != init_sigmas[r.attributes]
            ):
                raise RoundsMismatch(f"stored round {index} is not AIM's one-way measurement")
        elif index < d0() + len(planned := topup()):
            attrs = oneway[index - d0()]
            if r.kind != "measure" or r.attributes != attrs or r.sigma != planned[attrs]:
                raise RoundsMismatch(f"stored round {index} is not AIM's one-way top-up")
        elif r.kind == "measure" or rest_start:
            rest_start[:] = rest_start or [index]
            position = index - rest_start[0]
            if r.kind != "measure" or position >= len(oneway) or r.attributes != oneway[position]:
                raise RoundsMismatch(f"stored round {index} is not AIM's one-way rest")
        elif r.attributes not in weights or r.selection is None:
            raise RoundsMismatch(f"stored round {index} is not an AIM selection round")
        elif r.coarse is not None and (
            (groups := form_groups(domain, rho, run.rounds[: d0()], options)) is None
            or r.coarse != coarse_form(domain, r.attributes, groups)
        ):
            raise RoundsMismatch(f"stored round {index} is not a coarse form AIM offers")
        if any(prior.final for prior in run.rounds):
            raise RoundsMismatch("stored rounds continue after the final round")

    def measure_rest(start: int) -> None:
        """Spend what is left re-measuring the one-way marginals (n^(2/3) split), from
        where the rest begun at round `start` stands; the last of them is final."""
        run.closing = True  # past the last selection round
        todo = oneway[len(run.rounds) - start :]
        parts = oneway_parts(domain, todo) if todo else []
        for k, attrs in enumerate(todo):
            remaining = run.ledger.remaining
            if remaining <= rho * 1e-9:
                break
            last = k == len(todo) - 1
            part = 1.0 if last else parts[k] / math.fsum(parts[k:])
            sigma_k = measure_sigma(remaining * part, options.sensitivity)
            with run.access("measure", sigma_k, 0.0):
                run.measure("measure", attrs, sigma_k, 0.0, final=last)

    run.replay(check)
    for start in (0, d1) if halves else (0,):
        if start and not second():
            # a precise first half: its second's ρ goes to the selection rounds
            half = (options.init_share or 0.0) / 2.0
            sigma0, epsilon0 = selection_start(domain, rho, options, half)
            break
        for attrs in oneway[max(len(run.rounds) - start, 0) :]:
            with run.access("measure", init_sigmas[attrs], 0.0):
                run.measure("measure", attrs, init_sigmas[attrs], 0.0)
    init = run.rounds[: d0()]
    planned = topup()
    if len(run.rounds) < len(init) + len(planned):
        for attrs in oneway[len(run.rounds) - len(init) :]:
            with run.access("measure", planned[attrs], 0.0):
                run.measure("measure", attrs, planned[attrs], 0.0)
    if not run.rounds[-1].final:
        run.refit()

    sigma, epsilon, annealed, done = sigma0, epsilon0, False, False
    step = options.anneal_factor
    rows = estimated_rows(init)
    factor = filter_factor(init, options)
    groups = form_groups(domain, rho, init, options)
    last = run.rounds[-1]
    if rest_start:
        if not last.final:
            measure_rest(rest_start[0])  # resume the one-way rest
        done = True
    elif last.kind == "select+measure":
        sigma, epsilon, done = last.sigma, last.epsilon, last.final
        if not done and _anneal(run, last):
            sigma, epsilon, annealed = sigma / step, epsilon * step, True
    skipped = False  # the last σ change was a free annealing (nothing was measurable)
    while not done:
        remaining = run.ledger.remaining
        # Nothing (but float dust) left: a resumed run whose final round was lost after its
        # gate has spent it already; a round of the dust would measure nothing but noise.
        if remaining <= rho * 1e-9:
            break
        final = remaining < 2.0 * round_cost(sigma, epsilon, options.sensitivity)
        closing = False  # with the noise filter: the last selection round, then the one-way rest
        if final and options.noise_filter is not None:
            # The paper's final round gives one marginal the whole rest. Here the last
            # round costs what a round costs at this σ and what is left re-measures the
            # one-way marginals, which every workload marginal uses; so does all of it if
            # free annealing got here (nothing multi-way was measurable at an affordable σ).
            price = round_cost(sigma, epsilon, options.sensitivity)
            if skipped or remaining < price:
                measure_rest(len(run.rounds))
                break
            # (within half a round of the end, the paper's final round: no rest of dust)
            final, closing = remaining < 1.5 * price, remaining >= 1.5 * price
        if final:
            sigma, epsilon = split_round(remaining, alpha, options.sensitivity)
        cost = round_cost(sigma, epsilon, options.sensitivity)
        limit = options.max_model_cells * (run.ledger.used + cost) / rho
        candidates = size_filter(domain, run.measured, weights, limit, options.max_model_cells)
        if not candidates:  # refused before the round's access, so it costs nothing
            raise ValueError("no candidate marginal fits within the model size limit")
        # coarse forms of the pairs the noise filter leaves out, where rows are few
        offered, offered_weights = with_coarse_forms(domain, candidates, weights, groups)
        noise = noise_terms(run, offered, sigma, options)
        if options.noise_filter is not None:
            # the selection's sensitivity is k·max w_r: as if ε were ε/k
            selecting = (offered_weights, epsilon / options.sensitivity)
            affordable = without_needless_forms(
                noise_filter(offered, noise, rows, factor, selecting)
            )
            if not any(len(r) > 1 and not isinstance(r, Coarse) for r in affordable):
                # No full marginal of two or more attributes is measurable at this noise
                # (decided from N̂, public sizes and the model: free; a coarse form alone
                # never makes a round run): anneal before any access, or, in the final
                # round, spend the rest on the one-way marginals.
                if closing:
                    measure_rest(len(run.rounds))
                    break
                free = FREE_ANNEAL_FACTOR
                sigma, epsilon, annealed, skipped = sigma / free, epsilon * free, True, True
                continue
            offered = affordable
        skipped = False
        run.closing = final or closing
        with run.access("select+measure", sigma, epsilon):
            # (the paper's term goes as its coefficient, which the round then records)
            terms = noise if options.fitted_noise else SQRT_2_OVER_PI
            chosen, before, info = run.select(offered, offered_weights, sigma, epsilon, terms)
            record = run.measure(
                "select+measure",
                chosen,
                sigma,
                epsilon,
                annealed=annealed,
                final=final,
                estimate_before=before,
                selection_info=info,
            )
        if final:
            break  # `finish` fits the final model
        if closing:
            measure_rest(len(run.rounds))
            break
        run.refit()
        annealed = _anneal(run, record)
        if annealed:
            sigma, epsilon = sigma / step, epsilon * step
    return run.finish(weights)
