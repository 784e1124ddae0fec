"""Benchmark: AIM's noise term against the error a fitted model really keeps, pair by pair.

For every pair r of a table, the one-way marginals are measured at `--oneway-sigma`
and r at `--sigma` (Gaussian noise from numpy: a diagnostic, nothing is released), the
two are fitted by app.pgm, and the model's L1 error on r is averaged over `--draws`
draws. Beside it: the paper's noise term √(2/π)·σ·n_r, privq's (`fitted_noise`, taken
around the independence model of the exact one-way marginals, as AIM takes it around
its model), and r's L1 distance from that independence model (what measuring r could
win). Prints one JSON line per table: the pairs, largest distance first, and the
median ratio of each term to the measured error.

    .venv/bin/python bench/noise_term.py --tables penguins --sigma 15 --oneway-sigma 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aim import marginal_function
from peer_tables import load_table

from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.privacy.mechanisms.bounds import SQRT_2_OVER_PI
from app.privacy.mechanisms.fitted_noise import fitted_noise


def pair_errors(table: str, sigma: float, oneway_sigma: float, draws: int) -> dict[str, object]:
    domain, data = load_table(table, None)
    truth = marginal_function(domain, data)
    rows = data.shape[0]
    rng = np.random.default_rng(0)
    pairs = []
    for r in combinations(domain.attributes, 2):
        exact = truth(r).reshape(domain.shape(r)).astype(float)
        independent = np.outer(exact.sum(axis=1), exact.sum(axis=0)) / rows
        errors = []
        for _ in range(draws):
            measured = [
                Measurement(
                    (a,),
                    truth((a,)) + rng.normal(0.0, oneway_sigma, domain.cells((a,))),
                    "gaussian",
                    oneway_sigma,
                )
                for a in domain.attributes
            ]
            noisy = exact.ravel() + rng.normal(0.0, sigma, exact.size)
            measured.append(Measurement(r, noisy, "gaussian", sigma))
            model, _ = fit(domain, measured, max_iterations=500)
            errors.append(
                float(np.abs(np.asarray(model.marginal(r)).ravel() - exact.ravel()).sum())
            )
        pairs.append(
            {
                "pair": list(r),
                "cells": exact.size,
                "distance": float(np.abs(exact - independent).sum()),
                "fitted_error": statistics.fmean(errors),
                "raw_term": SQRT_2_OVER_PI * sigma * exact.size,
                "fitted_term": fitted_noise(domain, {r: independent}, sigma)[r],
            }
        )
    pairs.sort(key=lambda p: -float(p["distance"]))  # type: ignore[arg-type]
    return {
        "table": table,
        "rows": rows,
        "sigma": sigma,
        "oneway_sigma": oneway_sigma,
        "median_raw_over_fitted_error": statistics.median(
            float(p["raw_term"]) / float(p["fitted_error"])
            for p in pairs  # type: ignore[arg-type]
        ),
        "median_term_over_fitted_error": statistics.median(
            float(p["fitted_term"]) / float(p["fitted_error"])
            for p in pairs  # type: ignore[arg-type]
        ),
        "pairs": pairs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="penguins")
    parser.add_argument("--sigma", type=float, default=15.0)
    parser.add_argument("--oneway-sigma", type=float, default=6.0)
    parser.add_argument("--draws", type=int, default=4)
    args = parser.parse_args()
    for table in args.tables.split(","):
        print(json.dumps(pair_errors(table, args.sigma, args.oneway_sigma, args.draws)), flush=True)


if __name__ == "__main__":
    main()
