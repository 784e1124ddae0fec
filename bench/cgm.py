"""CGM-EM against mle on data drawn from known graphical models; prints a table and a JSON line.

Generator (own, seeded): a pairwise Markov random field over `--attributes` attributes with
2..6 values each, node log-potentials ~ N(0, 1) and edge log-potentials ~ N(0, strength²),
on a random tree or on a loopy graph (a cycle through every attribute plus two chords).
The population distribution is the exact normalised joint (brute force: the domains are
small). Each repetition draws N records (a multinomial over the joint), measures every
edge's 2-way marginal with Laplace noise of scale b = edges/ε (ε-DP: a record moves each
count marginal by 1 in L1), and fits both estimators to the same measurements.

Error: mean total-variation distance over all 2-way marginals, model vs the population.
Per row: the means over repetitions, the paired difference cgm − mle with its standard
error, and the median fit times. A row where cgm-em is worse by more than two standard
errors is flagged "LOSES". Noise here is numpy's: this is a simulation, nothing released.

Run: .venv/bin/python bench/cgm.py [--repetitions 10] [--attributes 7]
"""

from __future__ import annotations

import os

# As in `privq` processes (app/cli.py): one BLAS thread. L-BFGS-B's small dense updates
# were 18× slower with threads spinning on this shared 2-core host.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from app.pgm.cgm import fit_cgm_em  # noqa: E402
from app.pgm.domain import Domain  # noqa: E402
from app.pgm.estimation import Measurement, fit  # noqa: E402
from app.pgm.model import GraphicalModel  # noqa: E402


@dataclass(frozen=True)
class Population:
    domain: Domain
    joint: np.ndarray  # exact probabilities, axes in domain order
    edges: tuple[tuple[str, str], ...]

    def marginal(self, attrs: tuple[str, ...]) -> np.ndarray:
        axes = tuple(i for i, a in enumerate(self.domain.attributes) if a not in attrs)
        return np.asarray(self.joint.sum(axis=axes))


def random_mrf(
    rng: np.random.Generator, attributes: int, graph: str, strength: float
) -> Population:
    """A pairwise MRF on a random tree or a loopy graph, with its exact joint."""
    sizes = [int(rng.integers(2, 7)) for _ in range(attributes)]
    if graph == "tree":
        pairs = [(int(rng.integers(0, i)), i) for i in range(1, attributes)]
    else:
        pairs = [(i, (i + 1) % attributes) for i in range(attributes)]
        pairs += [(0, attributes // 2), (1, attributes // 2 + 2)]
    pairs = sorted({(min(p), max(p)) for p in pairs})
    names = tuple(f"a{i}" for i in range(attributes))
    log_joint = np.zeros(sizes)
    for i in range(attributes):
        shape = [1] * attributes
        shape[i] = sizes[i]
        log_joint = log_joint + rng.normal(0.0, 1.0, sizes[i]).reshape(shape)
    for i, j in pairs:
        shape = [1] * attributes
        shape[i], shape[j] = sizes[i], sizes[j]
        log_joint = log_joint + rng.normal(0.0, strength, (sizes[i], sizes[j])).reshape(shape)
    joint = np.exp(log_joint - log_joint.max())
    return Population(
        Domain(names, tuple(sizes)),
        joint / joint.sum(),
        tuple((names[i], names[j]) for i, j in pairs),
    )


def measure(
    rng: np.random.Generator, population: Population, records: int, epsilon: float
) -> list[Measurement]:
    counts = rng.multinomial(records, population.joint.ravel()).reshape(population.joint.shape)
    scale = len(population.edges) / epsilon
    data = Population(population.domain, counts.astype(float), population.edges)
    measurements = []
    for edge in population.edges:
        true = data.marginal(edge).ravel()
        measurements.append(
            Measurement(edge, true + rng.laplace(0.0, scale, true.size), "laplace", scale)
        )
    return measurements


def two_way_tv(model: GraphicalModel, population: Population) -> float:
    errors = [
        0.5 * float(np.abs(model.probabilities(pair) - population.marginal(pair)).sum())
        for pair in itertools.combinations(population.domain.attributes, 2)
    ]
    return float(np.mean(errors))


def run_row(
    graph: str, records: int, epsilon: float, repetitions: int, attributes: int, seed: int
) -> dict[str, object]:
    mle_tv, cgm_tv, mle_s, cgm_s, iterations = [], [], [], [], []
    for repetition in range(repetitions):
        rng = np.random.default_rng([seed, repetition, records, int(epsilon * 1000), len(graph)])
        population = random_mrf(rng, attributes, graph, strength=1.0)
        measurements = measure(rng, population, records, epsilon)
        started = time.perf_counter()
        model, _ = fit(population.domain, measurements)
        mle_s.append(time.perf_counter() - started)
        mle_tv.append(two_way_tv(model, population))
        started = time.perf_counter()
        model, record = fit_cgm_em(population.domain, measurements)
        cgm_s.append(time.perf_counter() - started)
        cgm_tv.append(two_way_tv(model, population))
        iterations.append(record.iterations)
    difference = np.array(cgm_tv) - np.array(mle_tv)
    spread = float(difference.std(ddof=1)) if repetitions > 1 else 0.0
    standard_error = spread / np.sqrt(repetitions)
    return {
        "graph": graph,
        "N": records,
        "epsilon": epsilon,
        "tv_mle": float(np.mean(mle_tv)),
        "tv_cgm": float(np.mean(cgm_tv)),
        "difference": float(difference.mean()),
        "standard_error": standard_error,
        "loses": bool(difference.mean() > 2 * standard_error),
        "seconds_mle": float(np.median(mle_s)),
        "seconds_cgm": float(np.median(cgm_s)),
        "em_iterations": float(np.median(iterations)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--attributes", type=int, default=7)
    parser.add_argument("--seed", type=int, default=2017)
    parser.add_argument("--records", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.5, 2.0])
    parser.add_argument("--graphs", nargs="+", default=["tree", "loopy"])
    args = parser.parse_args()
    rows = []
    header = (
        f"{'graph':6}{'N':>8}{'ε':>6}{'TV mle':>10}{'TV cgm':>10}{'cgm−mle ± se':>20}"
        f"{'s mle':>8}{'s cgm':>8}{'EM it':>7}"
    )
    print(header)
    for graph in args.graphs:
        for records in args.records:
            for epsilon in args.epsilons:
                row = run_row(graph, records, epsilon, args.repetitions, args.attributes, args.seed)
                rows.append(row)
                flag = "  LOSES" if row["loses"] else ""
                print(
                    f"{graph:6}{records:>8}{epsilon:>6}{row['tv_mle']:>10.4f}{row['tv_cgm']:>10.4f}"
                    f"{row['difference']:>+12.4f} ± {row['standard_error']:.4f}"
                    f"{row['seconds_mle']:>8.2f}{row['seconds_cgm']:>8.2f}"
                    f"{row['em_iterations']:>7.0f}{flag}",
                    flush=True,
                )
    time_ratio = float(
        np.median([float(r["seconds_cgm"]) / max(float(r["seconds_mle"]), 1e-9) for r in rows])
    )
    print(f"median time ratio cgm-em / mle: {time_ratio:.1f}")
    print(
        json.dumps(
            {
                "bench": "cgm",
                "repetitions": args.repetitions,
                "attributes": args.attributes,
                "rows": rows,
                "rows_where_cgm_loses": sum(bool(r["loses"]) for r in rows),
                "median_time_ratio": time_ratio,
            }
        )
    )


if __name__ == "__main__":
    main()
