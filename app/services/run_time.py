"""The expected run time of a mechanism job, from public sizes only (for its dry run).

A run's time is its fits': a few between-round fits per selection round and one final
fit, each about linear in the model's cells per iteration. What the records hold never
enters: the rows are private (the dry run may not depend on them) and the model a run
builds depends on what its selections find, which is not known before it runs. So the
estimate is for the largest model the request allows — `model_cells_at_most`, the cells
of the model that measures every workload marginal and every one-way marginal, capped by
`max_model_cells` — which AIM's size filter lets the model reach by its last round:

    expected_seconds = selection rounds × seconds a round + the final fit's seconds

- a selection round (AIM: T = `rounds_at_most`; MWEM: its rounds) refits the model,
  which by then is on average half the largest (AIM's size filter grows its limit with
  the ρ spent): `ROUND_FIT_ITERATIONS` iterations at `SECONDS_PER_CELL_ITERATION`, but
  never more than the larger of the run's between-round work bounds (ADMM until a fit
  is `round_admm_max_work` cell-iterations, mirror descent of `round_fit_work`), plus
  `SELECTION_SECONDS` to score its candidates;
- the final fit runs `final_fit_iterations` on the largest model.

The constants come from this machine (2 cores): a mirror-descent iteration takes about
0.4 µs a cell (issue 45's table: 500 iterations on 2.4M cells in 474 s on a quiet
machine), a between-round ADMM iteration 0.23–0.48 µs a cell (bench tables, CPU time),
and a warm-started between-round ADMM fit 100–250 iterations. Since the model is taken
at its largest, the figure is the upper end: a table with fewer rows measures smaller
marginals (its noise filter leaves the large ones out) and ends sooner — Adult's runs,
whose models stay near 20k–50k cells, take under a minute. A smaller `max_model_cells`
bounds the time (the answer shows how).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.pgm.domain import Domain
from app.pgm.junction_tree import model_cells
from app.privacy.mechanisms.options import MechanismOptions

SECONDS_PER_CELL_ITERATION = 0.4e-6
ROUND_FIT_ITERATIONS = 150
SELECTION_SECONDS = 0.1


def model_cells_at_most(domain: Domain, workload: Sequence[Sequence[str]], cap: int) -> int:
    """The largest model a run over `workload` may build: every workload marginal and
    every one-way marginal measured, within the cap."""
    oneway = [(a,) for a in domain.attributes]
    return min(cap, model_cells(domain, [*map(tuple, workload), *oneway]))


def expected_run_time(
    domain: Domain,
    workload: Sequence[Sequence[str]],
    *,
    max_model_cells: int,
    selection_rounds: int,
    options: MechanismOptions | None = None,
) -> dict[str, Any]:
    """`expected_seconds` and what it is made of (see the module docstring)."""
    options = options or MechanismOptions()
    largest = model_cells_at_most(domain, workload, max_model_cells)
    round_work = min(
        largest / 2 * ROUND_FIT_ITERATIONS,
        max(options.round_admm_max_work, options.round_fit_work),
    )
    per_round = round_work * SECONDS_PER_CELL_ITERATION + SELECTION_SECONDS
    final_fit = largest * options.final_fit_iterations * SECONDS_PER_CELL_ITERATION
    return {
        "expected_seconds": round(selection_rounds * per_round + final_fit, 1),
        "run_time": {
            "selection_rounds": selection_rounds,
            "seconds_per_round": round(per_round, 3),
            "model_cells_at_most": largest,
            "final_fit_seconds": round(final_fit, 1),
            "note": "for the largest model this request allows (every workload marginal "
            "measured, within max_model_cells): the upper end; runs on fewer rows build "
            "smaller models and end sooner. A smaller max_model_cells bounds the final "
            f"fit: about {options.final_fit_iterations * SECONDS_PER_CELL_ITERATION * 1e6:g} "
            "s per million model cells",
        },
    }
