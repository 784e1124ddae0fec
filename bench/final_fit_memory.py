"""Benchmark: peak memory (and time) of AIM's final fit on a model of about 10⁷ cells.

Builds the survey table (bench/survey_data.py), measures every one-way marginal and
then seeded random pairs while the model stays within `--cells` (as AIM's size filter
lets a run's model grow to `max_model_cells`), with Gaussian noise from numpy (a
bench, nothing is released). Then, in this fresh process, the fits a run ends with: a
between-round fit (its plan from `fit_plan`) and the final fit warm-started from it,
through `app.privacy.mechanisms.fitting` as the engine calls them. Prints ONE JSON
line: the model's cells and cliques, each fit's record, and the process's peak RSS
(`ru_maxrss`), which covers the table, the measurements and both fits.

    .venv/bin/python bench/final_fit_memory.py [--cells 10000000] [--seed 0]
        [--final-iterations N]   # cap the final fit (the peak is reached in its first)
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from survey_data import load

from app.pgm.junction_tree import build_junction_tree, model_cells
from app.pgm.measurement import Measurement
from app.privacy.mechanisms.fitting import fit_model, fit_plan
from app.privacy.mechanisms.options import MechanismOptions


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, default=10**7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sigma", type=float, default=60.0)
    parser.add_argument("--final-iterations", type=int, default=None)
    args = parser.parse_args()

    domain, data = load()
    rng = np.random.default_rng(args.seed)

    def noisy(attrs: tuple[str, ...]) -> Measurement:
        idx = [domain.index(a) for a in attrs]
        flat = np.ravel_multi_index(tuple(data[:, i] for i in idx), domain.shape(attrs))
        counts = np.bincount(flat, minlength=domain.cells(attrs)).astype(float)
        return Measurement(
            attrs, counts + rng.normal(0, args.sigma, counts.size), "gaussian", args.sigma
        )

    sets: list[tuple[str, ...]] = [(a,) for a in domain.attributes]
    pairs = list(combinations(domain.attributes, 2))
    for i in rng.permutation(len(pairs)):
        if model_cells(domain, [*sets, pairs[i]]) <= args.cells:
            sets.append(pairs[i])
    measurements = [noisy(s) for s in sets]
    tree = build_junction_tree(domain, sets)
    options = MechanismOptions(max_model_cells=max(args.cells, tree.total_cells))
    if args.final_iterations is not None:
        options = MechanismOptions(
            max_model_cells=options.max_model_cells,
            final_fit_iterations=args.final_iterations,
            final_min_iterations=1,
        )
    before = peak_mb()
    started = time.perf_counter()
    # the last between-round fit (on all but the last measurement), then the final fit
    plan = fit_plan(domain, sets[:-1], options, final=False, admm=False)
    model, round_record = fit_model(domain, measurements[:-1], options, None, plan)
    round_seconds = time.perf_counter() - started
    plan = fit_plan(domain, sets, options, final=True)
    started = time.perf_counter()
    model, record = fit_model(domain, measurements, options, model, plan)
    print(
        json.dumps(
            {
                "bench": "final_fit_memory",
                "model_cells": tree.total_cells,
                "cliques": len(tree.cliques),
                "largest_clique_cells": max(domain.cells(c) for c in tree.cliques),
                "measurements": len(measurements),
                "peak_rss_mb_before_fits": round(before, 1),
                "round_fit": {
                    "solver": round_record.solver,
                    "iterations": round_record.iterations,
                    "seconds": round(round_seconds, 1),
                },
                "final_fit": {
                    "solver": record.solver,
                    "iterations": record.iterations,
                    "converged": record.converged,
                    "seconds": round(time.perf_counter() - started, 1),
                    "final_loss": record.final_loss,
                },
                "peak_rss_mb": round(peak_mb(), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
