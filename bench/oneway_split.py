"""Benchmark: how close AIM's split of its one-way round is to the best split a table allows.

AIM's one-way round (and its top-up) splits its ρ over the one-way marginals in
proportion to n_i^(2/3), n_i the attribute's number of values: the split that minimises
the round's expected raw L1 noise Σ n_i·σ_i (app.privacy.mechanisms.aim). What the model
keeps is the noisy counts projected onto the non-negative counts of the table's total, and
that projection removes more noise from an attribute whose counts are uneven. This bench
asks what a split tuned to each table's own one-way marginals would win: an oracle (it
reads the true counts, so it is not a private mechanism), found by coordinate search over
the shares, against the n^(2/3) split and the equal split.

Error: the mean over the attributes of the one-way TV, ‖π(c + z) − c‖₁ / 2N, π the
Euclidean projection onto {x ≥ 0, Σx = N}, averaged over `--draws` Gaussian noise vectors
z (the same standard draws scaled by each split's σ_i, so the splits are compared on the
same noise). `--share` is the part of ρ the one-way marginals get: 0.7 where AIM takes its
top-up (a table whose rows are few for the budget), 1.0 where it ends as the one-way
baseline (iris, wine). Prints one JSON line per table.

    .venv/bin/python bench/oneway_split.py --tables anes96,penguins,small-n --share 0.7
    .venv/bin/python bench/oneway_split.py --tables iris,wine --share 1.0
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_tables import load_table

from app.privacy.accounting import rho_from_epsilon

FACTORS = (0.5, 0.7, 0.85, 1.2, 1.4, 2.0)  # the coordinate search's steps on one attribute's share


def project(values: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection of each row of `values` onto {x ≥ 0, Σx = total}."""
    ordered = -np.sort(-values, axis=1)
    excess = np.cumsum(ordered, axis=1) - total
    ranks = np.arange(1, values.shape[1] + 1)
    kept = ordered - excess / ranks > 0
    last = kept.shape[1] - 1 - np.argmax(kept[:, ::-1], axis=1)
    theta = excess[np.arange(values.shape[0]), last] / (last + 1)
    return np.maximum(values - theta[:, None], 0.0)


def split_error(
    counts: list[np.ndarray], draws: list[np.ndarray], rho: float, shares: np.ndarray
) -> float:
    """Mean one-way TV over the attributes when attribute i gets shares[i]·ρ."""
    shares = shares / shares.sum()
    errors = []
    for c, z, share in zip(counts, draws, shares, strict=True):
        sigma = math.sqrt(1.0 / (2.0 * rho * share))
        fitted = project(c + sigma * z, float(c.sum()))
        errors.append(float(np.abs(fitted - c).sum(axis=1).mean() / (2.0 * c.sum())))
    return float(np.mean(errors))


def best_split(
    counts: list[np.ndarray], draws: list[np.ndarray], rho: float, start: np.ndarray
) -> tuple[np.ndarray, float]:
    """The oracle: coordinate search from `start` over one share at a time."""
    best, error = start / start.sum(), split_error(counts, draws, rho, start)
    for _ in range(3):
        for i in range(best.size):
            for factor in FACTORS:
                candidate = best.copy()
                candidate[i] *= factor
                candidate /= candidate.sum()
                trial = split_error(counts, draws, rho, candidate)
                if trial < error:
                    best, error = candidate, trial
    return best, error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", default="anes96,penguins,small-n")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--share", type=float, default=0.7, help="part of ρ the round gets")
    parser.add_argument("--draws", type=int, default=400)
    args = parser.parse_args()
    rho = args.share * rho_from_epsilon(args.epsilon, args.delta)
    rng = np.random.default_rng(0)
    for table in args.tables.split(","):
        domain, data = load_table(table, None)
        counts = [
            np.bincount(data[:, i], minlength=n).astype(float) for i, n in enumerate(domain.sizes)
        ]
        draws = [rng.standard_normal((args.draws, c.size)) for c in counts]
        sizes = np.asarray(domain.sizes, dtype=float)
        aim = sizes ** (2.0 / 3.0)
        aim_error = split_error(counts, draws, rho, aim)
        equal_error = split_error(counts, draws, rho, np.ones_like(sizes))
        oracle, oracle_error = best_split(counts, draws, rho, aim)
        line = {
            "table": table,
            "rows": int(data.shape[0]),
            "sizes": list(domain.sizes),
            "epsilon": args.epsilon,
            "share": args.share,
            "oneway_tv_aim_split": round(aim_error, 5),
            "oneway_tv_equal_split": round(equal_error, 5),
            "oneway_tv_oracle_split": round(oracle_error, 5),
            "oracle_over_aim": round(oracle_error / aim_error, 4),
            "oracle_shares_over_aim": [round(float(x), 2) for x in oracle / (aim / aim.sum())],
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
