"""Benchmark: how much of AIM's error each of its parts leaves, by non-private oracles.

For each run of privq's AIM (default options, ε = 1, δ = 1e-6, every marginal of
`--degrees` attributes as the workload), the workload TV of:

- `aim`: the run's own model;
- `exact_oneway`, `exact_multiway`, `exact_all`: the final fit of the same rounds with
  the one-way measurements, the measurements of two or more attributes (coarse forms
  included), or all of them replaced by the exact answers they measured, at the same σ
  (what that part's noise costs, given what the run chose to measure);
- `argmax`: a run whose every selection takes the best-scoring candidate instead of the
  exponential mechanism's draw (what a perfect selection of the same scores would win);
- `redrawn_full` and `residual`: the final fit of the same rounds with every full
  marginal of two or more attributes measured again, at the same ρ, with fresh
  (continuous) Gaussian noise: as it was (`redrawn_full`), or as its residual, the part
  orthogonal to its attributes' lower-order marginals (`residual`: the integer query
  ⊗_i (n_i·I − 1·1ᵀ), whose L2 sensitivity is √Π n_i(n_i − 1), so the same ρ buys σ
  that many times larger on entries that many times larger: per unit of ρ, the
  interactions are measured with Π (1 − 1/n_i) of the full marginal's noise variance,
  and the main effects not at all; ResidualPlanner, Xiao et al. 2023). Left out of a
  run whose residual queries would be too large to fit (`RESIDUAL_NNZ`).

None of these is private: they are bounds for the mechanism's design, not systems.
Medians over `--seeds` runs in one process. Prints one JSON line per table.

    .venv/bin/python bench/aim_ceiling.py --tables anes96,penguins --degrees 2,3 --seeds 30
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aim import marginal_function
from peer_tables import load_table
from peers import _workload

from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.privacy import selection
from app.privacy.accounting import rho_from_epsilon
from app.privacy.mechanisms import run_aim

# The residual queries are dense within each marginal (n_a²·n_b² non-zeros for a pair):
# past this many in a run, the fit's factorisation runs out of memory (on Adult's
# pairs), and the run leaves both redrawn columns out.
RESIDUAL_NNZ = 2_000_000


def _exact(measurement: Measurement, truth: Any) -> Measurement:
    """The measurement with its values replaced by the exact answer, σ kept."""
    counts = np.asarray(truth(measurement.attributes), dtype=float).ravel()
    values = counts if measurement.query is None else measurement.query @ counts
    return Measurement(
        measurement.attributes, values, measurement.noise, measurement.scale, measurement.query
    )


def _redrawn(
    measurement: Measurement, truth: Any, domain: Any, rng: np.random.Generator
) -> tuple[Measurement, Measurement]:
    """A full multi-way measurement drawn again at its ρ, as it was and as its residual."""
    counts = np.asarray(truth(measurement.attributes), dtype=float).ravel()
    sigma = measurement.scale
    full = Measurement(
        measurement.attributes, counts + rng.normal(0, sigma, counts.size), "gaussian", sigma
    )
    query = sp.csr_matrix(np.ones((1, 1)))
    for a in measurement.attributes:
        n = domain.size_of(a)
        query = sp.kron(query, sp.csr_matrix(n * np.eye(n) - np.ones((n, n))), format="csr")
    scale = sigma * math.sqrt(
        math.prod(n * (n - 1) for n in domain.project(measurement.attributes).sizes)
    )
    values = query @ counts + rng.normal(0, scale, query.shape[0])
    return full, Measurement(measurement.attributes, values, "gaussian", scale, query)


def _argmax(scores: np.ndarray, epsilon: float, sensitivity: float) -> int:
    return int(np.argmax(scores))


def ceiling(table: str, degrees: list[int], seeds: int, rho: float) -> dict[str, float]:
    """Medians over `seeds` runs on `table` of AIM's TV and of each oracle's."""
    domain, data = load_table(table)
    truth = marginal_function(domain, data)
    rows = data.shape[0]
    workload = _workload(domain.attributes, degrees)

    def tv(model: Any) -> float:
        errors = [
            np.abs(truth(w).ravel() - np.asarray(model.marginal(w), dtype=float).ravel())
            for w in workload
        ]
        return float(np.mean([e.sum() / (2.0 * rows) for e in errors]))

    parts = {
        "exact_oneway": lambda m: len(m.attributes) == 1,
        "exact_multiway": lambda m: len(m.attributes) > 1,
        "exact_all": lambda m: True,
    }
    runs: dict[str, list[float]] = {
        k: [] for k in ("aim", *parts, "argmax", "redrawn_full", "residual")
    }
    rng = np.random.default_rng(0)
    drawn = selection.exponential_mechanism
    for seed in range(seeds):
        order = np.random.default_rng(seed).permutation(len(workload))
        shuffled = [workload[i] for i in order]
        result = run_aim(domain, truth, rho, shuffled)
        runs["aim"].append(tv(result.model))
        for kind, replaced in parts.items():
            refitted = [_exact(m, truth) if replaced(m) else m for m in result.measurements]
            runs[kind].append(tv(fit(domain, refitted)[0]))
        redrawn = [
            _redrawn(m, truth, domain, rng) if len(m.attributes) > 1 and m.query is None else (m, m)
            for m in result.measurements
        ]
        if sum(res.query.nnz for _, res in redrawn if res.query is not None) <= RESIDUAL_NNZ:
            runs["redrawn_full"].append(tv(fit(domain, [full for full, _ in redrawn])[0]))
            runs["residual"].append(tv(fit(domain, [res for _, res in redrawn])[0]))
        selection.exponential_mechanism = _argmax
        try:
            runs["argmax"].append(tv(run_aim(domain, truth, rho, shuffled).model))
        finally:
            selection.exponential_mechanism = drawn
    medians = {f"median_{k}": round(statistics.median(v), 5) for k, v in runs.items() if v}
    if not runs["residual"]:
        return medians
    ratios = np.asarray(runs["residual"]) / np.asarray(runs["redrawn_full"])
    return medians | {"median_residual_over_redrawn_full": round(float(np.median(ratios)), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", default="anes96,penguins")
    parser.add_argument("--degrees", default="2,3")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    args = parser.parse_args()
    rho = rho_from_epsilon(args.epsilon, args.delta)
    degrees = [int(k) for k in args.degrees.split(",")]
    for table in args.tables.split(","):
        line = {"bench": "aim_ceiling", "table": table, "epsilon": args.epsilon}
        line |= {"degrees": args.degrees, "seeds": args.seeds}
        line |= ceiling(table, degrees, args.seeds, rho)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
