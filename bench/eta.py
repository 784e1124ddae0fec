"""How good is a mechanism job's ETA? And the dry run's expected run time?

Runs AIM (all pairs, ε = 1, δ = 1e-9) on a bench table (bench/aim.py's tables) with the
job's own progress reporter (`app.services.job_progress.MechanismProgress`, as the
worker uses it), records every ETA it would write and, once the run is over, the time
that was really left at each. Prints ONE JSON line: the run's seconds, the dry run's
`expected_seconds` for the same request (public sizes only), and the ETA's error
(|ETA − time left| / time left) at 25%, 50% and 75% of the run, and during the final fit.

    .venv/bin/python bench/eta.py [--table adult] [--epsilon 1.0] [--rows N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aim import load_dataset, marginal_function  # the sibling bench's tables

from app.privacy.accounting import rho_from_epsilon
from app.privacy.mechanisms import MechanismOptions, run_aim
from app.privacy.mechanisms.aim import aim_schedule
from app.services.job_progress import MechanismProgress
from app.services.run_time import expected_run_time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", default="adult")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--trace", action="store_true", help="every ETA to stderr")
    args = parser.parse_args()
    domain, data = load_dataset(args.table, args.rows)
    workload = list(combinations(domain.attributes, 2))
    rho = rho_from_epsilon(args.epsilon, 1e-9)
    options = MechanismOptions()
    rounds_t = aim_schedule(domain, rho, options, workload)[0]
    expected = expected_run_time(
        domain,
        workload,
        rho=rho,
        max_model_cells=options.max_model_cells,
        selection_rounds=rounds_t,
    )
    reports = MechanismProgress(
        rho_total=rho,
        final_fit_solver=options.final_fit_solver,
        final_fit_iterations=options.final_fit_iterations,
    )
    etas: list[tuple[float, float, str]] = []  # (when, ETA, stage)

    def on_progress(progress):  # type: ignore[no-untyped-def]
        update = reports.update(progress)
        if update is not None and update["eta_seconds"] is not None:
            etas.append((time.monotonic(), update["eta_seconds"], update["stage"]))

    started = time.monotonic()
    run_aim(
        domain,
        marginal_function(domain, data),
        rho,
        workload,
        options=options,
        on_progress=on_progress,
    )
    ended = time.monotonic()
    total = ended - started
    if args.trace:
        for at, eta, stage in etas:
            print(
                f"{at - started:7.1f} s  ETA {eta:7.1f}  left {ended - at:7.1f}  {stage}",
                file=sys.stderr,
            )

    def error_at(share: float) -> float | None:
        after = [(at, eta) for at, eta, _ in etas if at - started >= share * total]
        if not after:
            return None
        at, eta = after[0]
        left = ended - at
        return round(abs(eta - left) / max(left, 1e-9), 3)

    final = [(at, eta) for at, eta, stage in etas if stage == "final fit"]
    final_error = None
    if final:
        at, eta = final[len(final) // 2]
        final_error = round(abs(eta - (ended - at)) / max(ended - at, 1e-9), 3)
    print(
        json.dumps(
            {
                "table": args.table,
                "epsilon": args.epsilon,
                "seconds": round(total, 1),
                "dry_run_expected_seconds": expected["expected_seconds"],
                "dry_run_expected_model_cells": expected["run_time"]["expected_model_cells"],
                "dry_run_at_most_seconds": expected["run_time"]["at_most_seconds"],
                "etas_written": len(etas),
                "first_eta_after_seconds": round(etas[0][0] - started, 1) if etas else None,
                "eta_error_at_25%": error_at(0.25),
                "eta_error_at_50%": error_at(0.5),
                "eta_error_at_75%": error_at(0.75),
                "eta_error_mid_final_fit": final_error,
            }
        )
    )


if __name__ == "__main__":
    main()
