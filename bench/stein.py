"""Benchmark: the "stein" estimator against "mle" on the same measurements.

For each run of privq's AIM (default options) and of the one-way baseline (every
one-way marginal, equal shares of ρ) on a table of bench/peer_tables.py, the workload
TV of the run's own model (its `mle` fit) and of the same measurements refitted with
`stein` (app.pgm.shrinkage), as the service refits a dataset set to it. Both fits see
the same noise, so their ratio run by run is free of the runs' own spread: the line
gives each median and the median of the per-run ratios (below 1: stein is better).

ε (`--epsilons`) with δ = 1e-6; workload every marginal of `--degrees` attributes.
Runs go two at a time in worker processes. One JSON line per table and ε.

    .venv/bin/python bench/stein.py --tables iris,wine,penguins,anes96,small-n,fair \\
        --epsilons 1,0.3,0.1 --seeds 16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

SYSTEMS = ("aim", "oneway")


def run_one(table: str, degrees: list[int], epsilon: float, system: str, seed: int) -> tuple:  # type: ignore[type-arg]
    """One run: (system, mle's TV, stein's TV) on the same measurements."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from aim import run_oneway, workload_tv
    from peers import bench_table

    from app.pgm.estimation import fit
    from app.pgm.shrinkage import ESTIMATOR
    from app.privacy.accounting import rho_from_epsilon
    from app.privacy.mechanisms import MechanismOptions, run_aim

    domain, data, truth, workload, shuffled = bench_table(table, degrees, seed)
    rho = rho_from_epsilon(epsilon, 1e-6)
    if system == "oneway":
        result = run_oneway(domain, truth, rho, MechanismOptions())
    else:
        result = run_aim(domain, truth, rho, shuffled)
    stein = fit(domain, result.measurements, estimator=ESTIMATOR, warm_start=result.model)[0]
    rows = data.shape[0]
    return (
        system,
        workload_tv(domain, result.model, truth, workload, rows),
        workload_tv(domain, stein, truth, workload, rows),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", default="iris,wine,penguins,anes96,small-n,fair")
    parser.add_argument("--epsilons", default="1")
    parser.add_argument("--degrees", default="2", help="workload: all k-way marginals, k in")
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    degrees = [int(k) for k in args.degrees.split(",")]
    with ProcessPoolExecutor(max_workers=2) as pool:
        for table in args.tables.split(","):
            for epsilon in (float(e) for e in args.epsilons.split(",")):
                jobs = [
                    pool.submit(run_one, table, degrees, epsilon, system, seed)
                    for seed in range(args.seeds)
                    for system in SYSTEMS
                ]
                runs: dict[str, list[tuple[float, float]]] = {s: [] for s in SYSTEMS}
                for job in jobs:
                    system, mle, stein = job.result()
                    runs[system].append((mle, stein))
                line: dict[str, Any] = {"table": table, "epsilon": epsilon}
                line |= {"degrees": args.degrees, "seeds": args.seeds}
                for system, pairs in runs.items():
                    line[f"{system}_mle"] = round(statistics.median(m for m, _ in pairs), 4)
                    line[f"{system}_stein"] = round(statistics.median(s for _, s in pairs), 4)
                    ratios = [s / m for m, s in pairs]
                    line[f"{system}_stein_over_mle"] = round(statistics.median(ratios), 4)
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
