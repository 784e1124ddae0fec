"""MWEM+PGM: MWEM with Private-PGM estimation (Algorithm 1 of the AIM paper).

T rounds, each spending ρ/T: a share 1 − α on an exponential-mechanism selection over
the workload marginals (quality ‖M_r(D) − M_r(p̂)‖₁, sensitivity k, the rows one privacy
unit may hold: `options.sensitivity`) and α on measuring the chosen marginal with
discrete Gaussian noise (σ proportional to k); the model is refitted after every
round (warm start). As in the reference implementation, round t only considers
marginals whose junction tree, added to the measured sets, stays within
(t/T)·max_model_cells cells. The last round spends exactly what is left (the same
σ and ε up to float rounding), so the run spends its whole charge.

Before the first measurement there is no model and the estimate is all zeros, so the
first selection is uniform (every quality equals the record count), unless earlier
measurements of the dataset (`base_measurements`) give a model to start from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Unpack

from app.pgm.domain import Domain
from app.privacy.mechanisms.budget import split_round
from app.privacy.mechanisms.engine import (
    MechanismResult,
    MechanismRun,
    RunArguments,
    TrueMarginal,
)
from app.privacy.mechanisms.options import MechanismOptions
from app.privacy.mechanisms.rounds import Round, RoundsMismatch
from app.privacy.mechanisms.workload import check_workload, normalise_workload, size_filter

NAME = "mwem"


def mwem_rounds(domain: Domain, options: MechanismOptions) -> int:
    return options.rounds or len(domain)


def run_mwem(
    domain: Domain,
    true_marginal: TrueMarginal,
    rho: float,
    workload: Iterable[Sequence[str] | tuple[Sequence[str], float]],
    **arguments: Unpack[RunArguments],
) -> MechanismResult:
    """Run (or resume) MWEM+PGM with total budget `rho` over `workload` (T = options.rounds).

    Same contract as `run_aim`; workload weights are ignored (each marginal has
    quality sensitivity k = `options.sensitivity`).
    """
    options = arguments["options"] = arguments.get("options") or MechanismOptions()
    normalised = normalise_workload(domain, workload)
    unit = {r: 1.0 for r in normalised}
    total_rounds = mwem_rounds(domain, options)
    check_workload(domain, normalised, options.max_model_cells)  # before any noise is drawn
    alpha = options.measure_share
    sigma, epsilon = split_round(rho / total_rounds, alpha, options.sensitivity)
    run = MechanismRun(NAME, domain, true_marginal, rho, unit, **arguments)

    def check(index: int, r: Round) -> None:
        if index >= total_rounds:
            raise RoundsMismatch(f"stored round {index} is beyond T = {total_rounds}")
        if r.kind != "select+measure" or r.attributes not in unit or r.selection is None:
            raise RoundsMismatch(f"stored round {index} is not an MWEM round")
        if index < total_rounds - 1 and r.sigma != sigma:
            raise RoundsMismatch(f"stored round {index} used another σ")

    run.replay(check)
    if run.rounds or run.base_measurements:
        run.refit()
    # A lost round (it ran, its ρ is spent, its output was never stored) used its slot.
    for t in range(len(run.rounds) + run.lost, total_rounds):
        final = t == total_rounds - 1
        round_sigma, round_epsilon = (
            split_round(run.ledger.remaining, alpha, options.sensitivity)
            if final
            else (sigma, epsilon)
        )
        limit = options.max_model_cells * (t + 1) / total_rounds
        candidates = size_filter(domain, run.measured, unit, limit, options.max_model_cells)
        if not candidates:
            # the schedule's limit is below every model (tiny caps, first rounds): fall back
            # to the hard cap rather than stop with budget unspent
            candidates = size_filter(
                domain, run.measured, unit, options.max_model_cells, options.max_model_cells
            )
        if not candidates:  # refused before the round's access, so it costs nothing
            raise ValueError("no candidate marginal fits within the model size limit")
        with run.access("select+measure", round_sigma, round_epsilon):
            chosen, before, info = run.select(candidates, unit, round_sigma, round_epsilon, 0.0)
            run.measure(
                "select+measure",
                chosen,
                round_sigma,
                round_epsilon,
                final=final,
                estimate_before=before,
                selection_info=info,
            )
        if not final:
            run.refit()  # the last round's fit is `finish`'s final fit
    return run.finish()
