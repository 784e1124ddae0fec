"""How often does a fit report on a large model? The longest silence of a final fit.

Builds a 13-attribute domain shaped like issue 45's table (3–24 values) and noisy
measurements of its one-way marginals and of every pair within `--window` attributes of
each other (window 6: a junction tree of 2.9M cells, cliques of 5–6 attributes), fits
it with `--solver` for `--iterations` iterations, and records when the fit called back
(each iteration) or beat (`heartbeat`: a step that is no iteration, e.g. building the
problem, a factorisation, a proportional-fitting sweep). Then times the marginals of
every pair of the fitted model (what a mechanism's last step, its error bounds, reads).
Prints ONE JSON line: the model's cells, the fit's seconds and iterations, the longest
gap between two reports in wall and in CPU seconds (a busy machine stretches the wall
time of the same work), before the first and after the last, and the pairs' seconds.

    .venv/bin/python bench/fit_progress.py [--solver mirror_descent] [--iterations 8] [--window 6]
"""

from __future__ import annotations

import argparse
import json
import time
from itertools import combinations

import numpy as np

from app.pgm.domain import Domain
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement

SIZES = (24, 16, 12, 10, 8, 6, 5, 4, 3, 3, 20, 7, 9)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--solver", default="mirror_descent")
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--window", type=int, default=6)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    names = tuple(f"x{i}" for i in range(len(SIZES)))
    domain = Domain(names, SIZES)
    pairs = [
        (names[i], names[j])
        for i in range(len(names))
        for j in range(i + 1, min(i + args.window, len(names)))
    ]
    measurements = [
        Measurement(s, rng.poisson(50, domain.cells(s)).astype(float), "gaussian", 10.0)
        for s in [(a,) for a in names] + pairs
    ]
    reports: list[tuple[float, float]] = []  # (wall, CPU) seconds at each report

    def stamp() -> None:
        reports.append((time.perf_counter(), time.process_time()))

    started = (time.perf_counter(), time.process_time())
    model, record = fit(
        domain,
        measurements,
        solver=args.solver,
        max_iterations=args.iterations,
        tolerance=0.0,
        callback=lambda _i, _loss: stamp(),
        heartbeat=stamp,
    )
    ended = (time.perf_counter(), time.process_time())
    times = np.array([started, *reports, ended])
    gaps, cpu_gaps = np.diff(times[:, 0]), np.diff(times[:, 1])
    pairs_started = time.perf_counter()
    for pair in combinations(names, 2):
        model.marginal(pair)
    print(
        json.dumps(
            {
                "solver": record.solver,
                "model_cells": record.model_cells,
                "iterations": record.iterations,
                "fit_seconds": round(ended[0] - started[0], 2),
                "reports": len(reports),
                "longest_silence_seconds": round(float(gaps.max()), 2),
                "longest_silence_cpu_seconds": round(float(cpu_gaps.max()), 2),
                "before_first_seconds": round(float(gaps[0]), 2),
                "after_last_seconds": round(float(gaps[-1]), 2),
                "all_pair_marginals_seconds": round(time.perf_counter() - pairs_started, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
