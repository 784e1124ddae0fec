"""The expected run time of a mechanism job, from public sizes only (for its dry run).

A run's time is its fits': a between-round fit per selection round and one final fit,
each about linear in the model's cells per iteration. What the records hold never
enters: the rows are private (the dry run may not depend on them), and the model a run
builds depends on what its selections find, which is not known before it runs. So the
model is estimated from ρ alone (`typical_model_cells`, calibrated on measured runs),
and the answer also gives the figure for the largest model the request allows
(`model_cells_at_most`: every workload and one-way marginal measured, within
`max_model_cells`, which AIM's size filter lets the model reach by its last round):

    seconds = selection rounds × seconds a round + the final fit's seconds

- a selection round (AIM: T = `rounds_at_most`; MWEM: its rounds) refits a model that
  is on average `ROUND_MODEL_SHARE` of the final one (it grows from the one-way model,
  most of it late): `ROUND_FIT_ITERATIONS` iterations at `SECONDS_PER_CELL_ITERATION`, never more
  than the larger of the run's between-round work bounds (`round_admm_max_work`,
  `round_fit_work`), plus `SELECTION_SECONDS` to score its candidates;
- the final fit on the final model: up to 200k cells ADMM, about
  `FINAL_ADMM_ITERATIONS` iterations; above, accelerated mirror descent for the
  iterations its plan allows (`fitting.final_fit_plan`: at most `final_fit_work` cells
  × iterations, so at most about `final_fit_work` × `FINAL_SECONDS_PER_CELL_ITERATION`
  whatever the model) at `FINAL_SECONDS_PER_CELL_ITERATION`.

The constants come from this machine (2 cores): a between-round iteration about 0.4 µs
a cell (mirror descent on the sparse measurement matrix: 500 iterations on 2.4M cells
in 474 s on a quiet machine; summing cliques instead, `app.pgm.problem`, it takes
about 0.15 µs of CPU), an ADMM iteration 0.23–0.48 µs a cell (bench tables, CPU
time), an accelerated final-fit iteration about 0.23 µs of CPU a cell
(bench/final_fit_plan.py, 475k cells). Against runs of AIM over all pairs
(bench/eta.py): Adult at ε = 1 took 31 and 56 s at load 7–17 and 190 s at load 20
(expected: 44 s; at most: 2,140 s), skewed 14 s (44 s); scale took 74–84 s at load
2–3 (docs/scaling.md; 117 s); a 336k-row, 13-attribute table at ρ = 0.5 took 592 s
on a quiet machine with a final fit of 500 mirror-descent iterations (474 s of it; one
of the calibration points), where the final fit's plan (100 accelerated iterations)
expects 61 s of 191 s. A
figure to plan by on a quiet machine, within a factor of about three, not a promise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.pgm.domain import Domain
from app.pgm.estimation import ADMM_MAX_CELLS
from app.pgm.junction_tree import model_cells
from app.privacy.mechanisms.fitting import final_fit_plan
from app.privacy.mechanisms.options import MechanismOptions

SECONDS_PER_CELL_ITERATION = 0.4e-6
FINAL_SECONDS_PER_CELL_ITERATION = 0.25e-6  # the final fit above ADMM's size
ROUND_FIT_ITERATIONS = 150
ROUND_MODEL_SHARE = 0.25  # a between-round model, on average, of the final one
FINAL_ADMM_ITERATIONS = 300  # an ADMM final fit converges in a few hundred (Adult: 438)
SELECTION_SECONDS = 0.1
# The typical final model: TYPICAL_CELLS at ρ = REFERENCE_RHO (ε = 1, δ = 1e-9), growing
# as ρ^TYPICAL_EXPONENT (more ρ: more rounds, larger marginals measurable). Calibrated on
# AIM's runs over all pairs: Adult (8k–50k cells), skewed (7.8k) and scale (110k+) at ε
# = 1; issue 45's 13-attribute table at ρ = 0.5 (2.4M).
REFERENCE_RHO = 0.015
TYPICAL_CELLS = 40_000
TYPICAL_EXPONENT = 1.17


def model_cells_at_most(domain: Domain, workload: Sequence[Sequence[str]], cap: int) -> int:
    """The largest model a run over `workload` may build: every workload marginal and
    every one-way marginal measured, within the cap."""
    oneway = [(a,) for a in domain.attributes]
    return min(cap, model_cells(domain, [*map(tuple, workload), *oneway]))


def typical_model_cells(domain: Domain, rho: float, largest: int) -> int:
    """The final model a run at `rho` typically builds (see TYPICAL_CELLS), within the
    largest it may and no smaller than its one-way model."""
    typical = TYPICAL_CELLS * (max(rho, 0.0) / REFERENCE_RHO) ** TYPICAL_EXPONENT
    oneway = sum(domain.sizes)
    return int(min(largest, max(oneway, typical)))


def _seconds(cells: int, selection_rounds: int, options: MechanismOptions) -> tuple[float, float]:
    """(seconds a selection round, the final fit's seconds) on a final model of `cells`."""
    round_work = min(
        cells * ROUND_MODEL_SHARE * ROUND_FIT_ITERATIONS,
        max(options.round_admm_max_work, options.round_fit_work),
    )
    per_round = round_work * SECONDS_PER_CELL_ITERATION + SELECTION_SECONDS
    plan = final_fit_plan(cells, options)
    if cells <= ADMM_MAX_CELLS:  # the final fit's "auto" solver is ADMM
        iterations = min(plan.max_iterations, FINAL_ADMM_ITERATIONS)
        return per_round, cells * iterations * SECONDS_PER_CELL_ITERATION
    return per_round, cells * plan.max_iterations * FINAL_SECONDS_PER_CELL_ITERATION


def expected_run_time(
    domain: Domain,
    workload: Sequence[Sequence[str]],
    *,
    rho: float,
    max_model_cells: int,
    selection_rounds: int,
    options: MechanismOptions | None = None,
) -> dict[str, Any]:
    """`expected_seconds` and what it is made of (see the module docstring)."""
    options = options or MechanismOptions()
    largest = model_cells_at_most(domain, workload, max_model_cells)
    typical = typical_model_cells(domain, rho, largest)
    per_round, final_fit = _seconds(typical, selection_rounds, options)
    worst_round, worst_final = _seconds(largest, selection_rounds, options)
    return {
        "expected_seconds": round(selection_rounds * per_round + final_fit, 1),
        "run_time": {
            "selection_rounds": selection_rounds,
            "seconds_per_round": round(per_round, 3),
            "expected_model_cells": typical,
            "final_fit_seconds": round(final_fit, 1),
            "model_cells_at_most": largest,
            "at_most_seconds": round(selection_rounds * worst_round + worst_final, 1),
            "note": "expected for the model a run at this rho typically builds (calibrated "
            "on AIM's runs over all pairs); at most for the largest model the request "
            "allows. The rows never enter: a table with fewer rows builds smaller models. "
            "A smaller max_model_cells bounds the time",
        },
    }
