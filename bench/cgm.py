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
error, and the median fit times. A row where cgm-em (the shipped start, "mle") is worse by
more than two standard errors is flagged "LOSES". `--starts` adds EM runs from the other
starts (app/pgm/cgm.py explains them) as paired differences against mle, with how far
their final L1 objective stayed above mle's (median). Noise here is numpy's: this is a
simulation, nothing released.

Run: .venv/bin/python bench/cgm.py [--repetitions 10] [--starts mle gaussian uniform]
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

from app.pgm.cgm_starts import STARTS, fit_from_start  # noqa: E402
from app.pgm.domain import Domain  # noqa: E402
from app.pgm.estimation import fit  # noqa: E402
from app.pgm.measurement import Measurement  # noqa: E402
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


def _paired(difference: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of paired differences."""
    spread = float(difference.std(ddof=1)) if difference.size > 1 else 0.0
    return float(difference.mean()), spread / np.sqrt(difference.size)


def run_row(
    graph: str,
    records: int,
    epsilon: float,
    repetitions: int,
    attributes: int,
    seed: int,
    starts: list[str],
) -> dict[str, object]:
    mle_tv, mle_s, mle_loss = [], [], []
    tv: dict[str, list[float]] = {s: [] for s in starts}
    seconds: dict[str, list[float]] = {s: [] for s in starts}
    iterations: dict[str, list[int]] = {s: [] for s in starts}
    excess: dict[str, list[float]] = {s: [] for s in starts}
    for repetition in range(repetitions):
        rng = np.random.default_rng([seed, repetition, records, int(epsilon * 1000), len(graph)])
        population = random_mrf(rng, attributes, graph, strength=1.0)
        measurements = measure(rng, population, records, epsilon)
        started = time.perf_counter()
        model, record = fit(population.domain, measurements)
        mle_s.append(time.perf_counter() - started)
        mle_tv.append(two_way_tv(model, population))
        mle_loss.append(record.final_loss)
        mle_iterations = record.iterations
        for start in starts:
            started = time.perf_counter()
            model, record = fit_from_start(population.domain, measurements, start)
            seconds[start].append(time.perf_counter() - started)
            tv[start].append(two_way_tv(model, population))
            # From mle's start the record counts the solver's iterations first.
            solver_part = mle_iterations if start == "mle" else 0
            iterations[start].append(record.iterations - solver_part)
            excess[start].append(record.final_loss - mle_loss[-1])
    row: dict[str, object] = {
        "graph": graph,
        "N": records,
        "epsilon": epsilon,
        "tv_mle": float(np.mean(mle_tv)),
        "seconds_mle": float(np.median(mle_s)),
    }
    for start in starts:
        difference, standard_error = _paired(np.array(tv[start]) - np.array(mle_tv))
        row[start] = {
            "tv": float(np.mean(tv[start])),
            "difference": difference,
            "standard_error": standard_error,
            "loses": bool(difference > 2 * standard_error),
            "seconds": float(np.median(seconds[start])),
            "em_iterations": float(np.median(iterations[start])),
            "l1_above_mle": float(np.median(excess[start])),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--attributes", type=int, default=7)
    parser.add_argument("--seed", type=int, default=2017)
    parser.add_argument("--records", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.5, 2.0])
    parser.add_argument("--graphs", nargs="+", default=["tree", "loopy"])
    parser.add_argument("--starts", nargs="+", default=list(STARTS), choices=STARTS)
    args = parser.parse_args()
    starts = ["mle", *(s for s in args.starts if s != "mle")]  # the shipped start first
    rows = []
    print(f"{'graph':6}{'N':>7}{'ε':>5}{'TV mle':>8}{'s':>6}", end="")
    for start in starts:
        print(f" | start {start:<9}{'TV−mle ± se':>17}{'s':>6}{'it':>5}{'L1+':>6}", end="")
    print()
    for graph in args.graphs:
        for records in args.records:
            for epsilon in args.epsilons:
                row = run_row(
                    graph, records, epsilon, args.repetitions, args.attributes, args.seed, starts
                )
                rows.append(row)
                line = f"{graph:6}{records:>7}{epsilon:>5}{row['tv_mle']:>8.4f}"
                line += f"{row['seconds_mle']:>6.2f}"
                for start in starts:
                    r = row[start]
                    assert isinstance(r, dict)
                    line += (
                        f" | {r['tv']:>15.4f}{r['difference']:>+9.4f} ± {r['standard_error']:.4f}"
                        f"{r['seconds']:>6.2f}{r['em_iterations']:>5.0f}{r['l1_above_mle']:>6.2f}"
                        + ("!" if r["loses"] else " ")
                    )
                print(line, flush=True)
    ratios = []
    losing = dict.fromkeys(starts, 0)
    for row in rows:
        for start in starts:
            r = row[start]
            assert isinstance(r, dict)
            losing[start] += int(r["loses"])
        shipped = row["mle"]
        assert isinstance(shipped, dict)
        ratios.append(float(shipped["seconds"]) / max(float(row["seconds_mle"]), 1e-9))  # type: ignore[arg-type]
    ratio = float(np.median(ratios))
    print(f"rows where a start loses to mle by more than 2 se (marked !): {losing}")
    print(f"median time ratio, cgm-em (start mle) / mle: {ratio:.2f}")
    print(
        json.dumps(
            {
                "bench": "cgm",
                "repetitions": args.repetitions,
                "attributes": args.attributes,
                "rows": rows,
                "rows_where_start_loses": losing,
                "median_time_ratio": ratio,
            }
        )
    )


if __name__ == "__main__":
    main()
