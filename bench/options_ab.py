"""Benchmark: privq's AIM under two or more schedules, interleaved in one run.

Each variant is a JSON object of `MechanismOptions` overrides (`{}`: the defaults), or
`oneway` for the one-way baseline (every one-way marginal, equal shares of ρ). Run k
of every variant uses the same workload order (seed k) and the variants' runs
alternate, two at a time in worker processes, so drift in the machine's load falls on
all of them alike. The noise is OpenDP's and cannot be seeded: compare medians, never
single runs.

Prints one JSON line per variant: its median workload TV of the fitted model (as
bench/peers.py scores it), interquartile range, its median over the first variant's
and a 90% bootstrap interval of that ratio.

    .venv/bin/python bench/options_ab.py --table penguins --degrees 2,3 --seeds 60 \\
        '{}' '{"measure_share_3way": 0.6}' oneway
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run_one(table: str, degrees: list[int], epsilon: float, variant: str, seed: int) -> float:
    """One run of `variant` on `table`: its model's workload TV."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from aim import run_oneway, workload_tv
    from peers import bench_table

    from app.privacy.accounting import rho_from_epsilon
    from app.privacy.mechanisms import MechanismOptions, run_aim

    domain, data, truth, workload, shuffled = bench_table(table, degrees, seed)
    rho = rho_from_epsilon(epsilon, 1e-6)
    if variant == "oneway":
        result = run_oneway(domain, truth, rho, MechanismOptions())
    else:
        options = MechanismOptions(**json.loads(variant))
        result = run_aim(domain, truth, rho, shuffled, options=options)
    return float(workload_tv(domain, result.model, truth, workload, data.shape[0]))


def main() -> None:
    from peers import iqr, ratio_interval

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("variants", nargs="+", help="JSON MechanismOptions overrides, or oneway")
    parser.add_argument("--table", default="penguins")
    parser.add_argument("--degrees", default="2", help="workload: all k-way marginals, k in")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    for variant in args.variants:
        if variant != "oneway":
            json.loads(variant)  # a typo fails here, before any run
    degrees = [int(k) for k in args.degrees.split(",")]
    runs: dict[str, list[float]] = {v: [] for v in args.variants}
    with ProcessPoolExecutor(max_workers=2) as pool:
        jobs = [
            (v, pool.submit(run_one, args.table, degrees, args.epsilon, v, seed))
            for seed in range(args.seeds)
            for v in args.variants
        ]
        for variant, job in jobs:
            runs[variant].append(job.result())
    base = runs[args.variants[0]]
    for variant, tvs in runs.items():
        line = {"table": args.table, "degrees": args.degrees, "epsilon": args.epsilon}
        line |= {"variant": variant, "runs": len(tvs)}
        line |= {"median_tv": round(statistics.median(tvs), 4), "iqr_tv": round(iqr(tvs), 4)}
        line["over_first"] = round(statistics.median(tvs) / statistics.median(base), 3)
        line["over_first_90"] = ratio_interval(tvs, base)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
