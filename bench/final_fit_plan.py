"""Benchmark: what AIM's final fit buys per iteration, from one run's own warm start.

Runs AIM once (survey table, bench/survey_data.py, all pairs, `--rho`), keeps what its
final fit started from (the measurements and the last between-round model), and then
refits from that same start with at most K iterations for each K in `--iterations`:
the workload TV of each result, its seconds, the loss, and the iteration where the
relative change of the loss first fell below 1e-4, 1e-5 and 1e-6 (the final fit's
stopping rule, `FitRun.stalled`). So the final fit's plan is measured on one run's noise
rather than across runs with fresh noise. Prints ONE JSON line.

    .venv/bin/python bench/final_fit_plan.py [--rho 0.5] [--iterations 10,25,50,100,200,500]
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aim import marginal_function, workload_tv
from survey_data import load

import app.privacy.mechanisms.engine as engine
from app.privacy.mechanisms import MechanismOptions, run_aim
from app.privacy.mechanisms.fitting import FitPlan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--iterations", default="10,25,50,100,200,500")
    parser.add_argument("--max-model-cells", type=int, default=10**7)
    parser.add_argument("--solvers", default="mirror_descent")
    parser.add_argument("--save", default=None, help="pickle the final fit's start here")
    parser.add_argument("--load", default=None, help="refit from a saved start (no AIM run)")
    args = parser.parse_args()
    domain, data = load()
    truth = marginal_function(domain, data)
    workload = list(combinations(domain.attributes, 2))
    calls: list[tuple[Any, ...]] = []
    original = engine.fit_model

    def keep(domain, measurements, options, warm_start, plan, reports=None):  # type: ignore[no-untyped-def]
        calls.append((list(measurements), warm_start))
        return original(domain, measurements, options, warm_start, plan, reports)

    engine.fit_model = keep
    options = MechanismOptions(max_model_cells=args.max_model_cells)
    run: dict[str, Any] = {}
    if args.load:
        with open(args.load, "rb") as handle:
            measurements, warm = pickle.load(handle)
    else:
        started = time.perf_counter()
        result = run_aim(domain, truth, args.rho, workload, options=options)
        run = {
            "run_seconds": round(time.perf_counter() - started, 1),
            "run_final_fit": {
                "solver": result.fit.solver,
                "iterations": result.fit.iterations,
                "seconds": round(result.fit.seconds, 1),
                "converged": result.fit.converged,
            },
            "model_cells": result.fit.model_cells,
            "run_tv": workload_tv(domain, result.model, truth, workload, data.shape[0]),
        }
        measurements, warm = calls[-1]
        if args.save:
            with open(args.save, "wb") as handle:
                pickle.dump((measurements, warm), handle)
    refits = []
    caps = [int(k) for k in args.iterations.split(",")]
    for solver, cap in ((s, k) for s in args.solvers.split(",") for k in caps):
        plan = FitPlan(solver, cap, 0.0)
        started = time.perf_counter()
        model, record = original(domain, measurements, options, warm, plan)
        losses = record.losses
        first_below = {}
        for tol in (1e-4, 1e-5, 1e-6):
            first_below[str(tol)] = next(
                (
                    i + 1
                    for i in range(1, len(losses))
                    if abs(losses[i - 1] - losses[i]) <= tol * max(abs(losses[i]), 1.0)
                ),
                None,
            )
        refits.append(
            {
                "solver": solver,
                "iterations": record.iterations,
                "seconds": round(time.perf_counter() - started, 2),
                "tv": workload_tv(domain, model, truth, workload, data.shape[0]),
                "final_loss": record.final_loss,
                "stalled_at": first_below,
            }
        )
    print(
        json.dumps(
            {
                "bench": "final_fit_plan",
                "rho": args.rho,
                **run,
                "refits": refits,
            }
        )
    )


if __name__ == "__main__":
    main()
