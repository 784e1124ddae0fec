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

The run is resumable (see `engine`): stored rounds are replayed (no noise drawn), the
ρ of rounds that ran but were lost before they were stored is taken as spent, the
one-way initialisation is finished if it was interrupted, and the annealing decision
after the last stored round is recomputed from the refitted model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Unpack

import numpy as np

from app.pgm.domain import Domain
from app.privacy.mechanisms.bounds import SQRT_2_OVER_PI
from app.privacy.mechanisms.budget import round_cost, split_round
from app.privacy.mechanisms.engine import (
    MechanismOptions,
    MechanismResult,
    MechanismRun,
    RunArguments,
    TrueMarginal,
)
from app.privacy.mechanisms.rounds import Attrs, Round, RoundsMismatch
from app.privacy.mechanisms.workload import candidate_weights, normalise_workload, size_filter

NAME = "aim"


def aim_schedule(domain: Domain, rho: float, options: MechanismOptions) -> tuple[int, float, float]:
    """(T, σ₀, ε₀) of a run: T = 16·d unless `options.rounds` says otherwise."""
    rounds = options.rounds or 16 * len(domain)
    sigma0, epsilon0 = split_round(rho / rounds, options.measure_share)
    return rounds, sigma0, epsilon0


def _anneal(run: MechanismRun, last: Round) -> bool:
    """AIM's test: did measuring `last` move the model's answer by less than the noise?"""
    if last.estimate_before is None:
        raise RoundsMismatch(f"round {last.index} has no estimate before it: cannot anneal")
    after = run.estimate(last.attributes)
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
    options = arguments["options"] = arguments.get("options") or MechanismOptions()
    normalised = normalise_workload(domain, workload)
    weights = candidate_weights(domain, normalised)
    _, sigma0, epsilon0 = aim_schedule(domain, rho, options)
    alpha = options.measure_share
    oneway: list[Attrs] = [r for r in weights if len(r) == 1]
    rounds_t = aim_schedule(domain, rho, options)[0]
    if rounds_t <= len(oneway):
        # the one-way initialisation alone would cost α·d'/T·ρ ≥ αρ, leaving no rounds
        raise ValueError(
            f"AIM needs more rounds (T = {rounds_t}) than one-way marginals ({len(oneway)})"
        )
    run = MechanismRun(NAME, domain, true_marginal, rho, normalised, **arguments)

    def check(index: int, r: Round) -> None:
        if index < len(oneway):
            if r.kind != "measure" or r.attributes != oneway[index] or r.sigma != sigma0:
                raise RoundsMismatch(f"stored round {index} is not AIM's one-way measurement")
        elif r.kind != "select+measure" or r.attributes not in weights or r.selection is None:
            raise RoundsMismatch(f"stored round {index} is not an AIM selection round")
        if any(prior.final for prior in run.rounds):
            raise RoundsMismatch("stored rounds continue after the final round")

    run.replay(check)
    for attrs in oneway[len(run.rounds) :]:
        with run.access("measure", sigma0, 0.0):
            run.measure("measure", attrs, sigma0, 0.0)
    if not run.rounds[-1].final:
        run.refit()

    sigma, epsilon, annealed, done = sigma0, epsilon0, False, False
    last = run.rounds[-1]
    if last.kind == "select+measure":
        sigma, epsilon, done = last.sigma, last.epsilon, last.final
        if not done and _anneal(run, last):
            sigma, epsilon, annealed = sigma / 2.0, epsilon * 2.0, True
    while not done:
        remaining = run.ledger.remaining
        # Nothing (but float dust) left: a resumed run whose final round was lost after its
        # gate has spent it already; a round of the dust would measure nothing but noise.
        if remaining <= rho * 1e-9:
            break
        final = remaining < 2.0 * round_cost(sigma, epsilon)
        if final:
            sigma, epsilon = split_round(remaining, alpha)
        cost = round_cost(sigma, epsilon)
        limit = options.max_model_cells * (run.ledger.used + cost) / rho
        candidates = size_filter(domain, run.measured, weights, limit, options.max_model_cells)
        if not candidates:  # refused before the round's access, so it costs nothing
            raise ValueError("no candidate marginal fits within the model size limit")
        with run.access("select+measure", sigma, epsilon):
            chosen, before, info = run.select(candidates, weights, sigma, epsilon, SQRT_2_OVER_PI)
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
        run.refit()
        annealed = _anneal(run, record)
        if annealed:
            sigma, epsilon = sigma / 2.0, epsilon * 2.0
    return run.finish(weights)
