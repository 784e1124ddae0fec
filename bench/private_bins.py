"""Benchmark: how close `privq schema draft --private-bins RHO` puts its edges to a column's
quantiles, by rows and ρ.

A skewed column (log-normal, `--rows` values; whole numbers with `--whole`) is drafted
alone with `--bins` bins and private bins at each ρ of `--rhos`, `--repeats` times.
For each draft: the largest rank error of an inner edge, max_i |F(e_i) − i/k| (F the
column's empirical distribution, k the number of bins the draft made), as a share of
the rows; the share of rows outside [e_0, e_k] (clipped into the end bins); the number
of bins; and the seconds the draft took. Prints one JSON line per (rows, ρ) with the
median and worst over the repeats.

    .venv/bin/python bench/private_bins.py --rows 1000,10000,100000 --rhos 0.01,0.1,1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pyarrow as pa

from app.schema.drafting import draft_schema


def one_draft(values: np.ndarray, rho: float, bins: int) -> dict[str, float]:
    started = time.perf_counter()
    draft = draft_schema(pa.table({"x": values}), bins=bins, private_bins=rho)
    seconds = time.perf_counter() - started
    (attribute,) = draft.schema["attributes"]
    if attribute["type"] == "numeric":
        edges = np.asarray(attribute["bins"], dtype=np.float64)
    else:  # one code per integer value
        edges = np.arange(attribute["min"], attribute["max"] + 2, dtype=np.float64)
    ordered = np.sort(values)
    below = np.searchsorted(ordered, edges, side="left") / len(values)
    k = len(edges) - 1
    inner = below[1:-1] - np.arange(1, k) / k
    return {
        "rank_error": float(np.max(np.abs(inner))) if k > 1 else 0.0,
        "clipped": float(
            below[0] + (1.0 - np.searchsorted(ordered, edges[-1], "right") / len(values))
        ),
        "bins": float(k),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000,10000,100000")
    parser.add_argument("--rhos", default="0.01,0.1,1")
    parser.add_argument("--bins", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--whole", action="store_true", help="round the values to integers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for rows in (int(r) for r in args.rows.split(",")):
        values = rng.lognormal(3.0, 1.0, rows)
        if args.whole:
            values = np.round(values)
        for rho in (float(r) for r in args.rhos.split(",")):
            runs = [one_draft(values, rho, args.bins) for _ in range(args.repeats)]
            summary: dict[str, object] = {"rows": rows, "rho": rho, "bins_asked": args.bins}
            for key in ("rank_error", "clipped", "bins", "seconds"):
                column = [run[key] for run in runs]
                summary[f"{key}_median"] = round(statistics.median(column), 4)
                summary[f"{key}_worst"] = round(max(column), 4)
            print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
