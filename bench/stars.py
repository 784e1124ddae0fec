"""Benchmark: what a star of pairs around one attribute would win on a table, hub by hub.

For each attribute h as the hub, a plan that is not private in its choice (h is fixed
by hand) spends `--star-share` of ρ on every pair (h, j), split in proportion to the
pairs' cells to the two thirds, and the rest on the one-way marginals (the same
split); the baseline spends all of ρ on the one-way marginals. Each plan's noisy
marginals (Gaussian noise from numpy: a diagnostic, nothing here is released) are
fitted by app.pgm and scored by the workload TV (every 2-way marginal). Prints one
JSON line per table: each plan's median and mean TV over `--seeds` draws, best first.
It tells which hubs a private choice between a star and the one-way top-up would have
to find (docs/mechanisms.md, "Peers").

    .venv/bin/python bench/stars.py --tables penguins,anes96,small-n --seeds 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aim import marginal_function
from peer_tables import load_table
from peers import _workload

from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.privacy.accounting import rho_from_epsilon


def _split(domain, marginals: list[tuple[str, ...]]) -> np.ndarray:  # type: ignore[no-untyped-def]
    parts = np.array([domain.cells(r) ** (2.0 / 3.0) for r in marginals], dtype=float)
    return parts / parts.sum()


def stars(table: str, rho: float, share: float, seeds: int) -> dict[str, object]:
    domain, data = load_table(table, None)
    truth = marginal_function(domain, data)
    rows = data.shape[0]
    names = list(domain.attributes)
    workload = _workload(domain.attributes, [2])
    oneway = [(a,) for a in names]
    scores: dict[str, list[float]] = {}
    for seed in range(seeds):
        for position, hub in enumerate([None, *names]):
            rng = np.random.default_rng(seed * 1000 + position)
            plan = [(r, p * rho) for r, p in zip(oneway, _split(domain, oneway), strict=True)]
            if hub is not None:
                pairs = [tuple(sorted((hub, j), key=names.index)) for j in names if j != hub]
                plan = [(r, (1.0 - share) * part) for r, part in plan]
                split = _split(domain, pairs)
                plan += [(r, share * p * rho) for r, p in zip(pairs, split, strict=True)]
            measured = []
            for attrs, part in plan:
                sigma = float(np.sqrt(1.0 / (2.0 * part)))
                exact = truth(attrs)
                noisy = exact + rng.normal(0.0, sigma, exact.size)
                measured.append(Measurement(attrs, noisy, "gaussian", sigma))
            model, _ = fit(domain, measured, max_iterations=1000)
            error = np.mean(
                [
                    np.abs(truth(w) - np.asarray(model.marginal(w)).ravel()).sum() / (2.0 * rows)
                    for w in workload
                ]
            )
            scores.setdefault(hub or "one-way only", []).append(float(error))
    ranked = sorted(scores.items(), key=lambda item: statistics.median(item[1]))
    return {
        "table": table,
        "rows": rows,
        "star_share": share,
        "plans": [
            {"hub": hub, "median_tv": statistics.median(v), "mean_tv": statistics.fmean(v)}
            for hub, v in ranked
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", default="penguins,anes96,small-n")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--star-share", type=float, default=0.5)
    args = parser.parse_args()
    rho = rho_from_epsilon(args.epsilon, args.delta)
    for table in args.tables.split(","):
        print(json.dumps(stars(table, rho, args.star_share, args.seeds)), flush=True)


if __name__ == "__main__":
    main()
