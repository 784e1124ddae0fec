"""Estimation benchmark: fit Private-PGM to Adult's noisy measurements, print one JSON line.

Inputs (in /work/shared/data, or $PRIVQ_SHARED_DATA): adult.csv (integer codes, header
row), adult-domain.json, adult-measurements-sigma10.npz (24 noisy count marginals with
Gaussian noise σ = 10; keys are attribute names joined by "|").

Keys printed:
- seconds_to_fit: from the start of this process (interpreter start, imports, loading the
  measurements included) to the default fit's return; within_1pct says whether that
  fit's L2 is within 1% of best_l2, the lowest L2 any run below reached.
- l2: Σ_c ‖μ_c − y_c‖² in counts over the 24 measurements, μ from the model.
- seconds_per_iteration and l2_at_iterations: per solver, with iterations capped.
- tv_3way / tv_3way_independent: mean total-variation distance over all 364 three-way
  marginals, model (or the product of clipped noisy one-way marginals) vs the data.
- triples_per_second_cold: the 364 marginals from a model just loaded from bytes
  (calibration and query planning included).
- peak_memory_mb: ru_maxrss of this process (peak_memory_mb_after_fit: the same, read
  right after the default fit; the later peak comes from the 364 three-way queries).

Run: .venv/bin/python bench/estimation.py
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_WALL_AT_IMPORT = time.time()


def _seconds_since_process_start() -> float:
    """Wall seconds since this process was created (Linux /proc; else since this import)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat: starttime, in clock ticks since boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time() - _WALL_AT_IMPORT


import itertools  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402

import numpy as np  # noqa: E402

from app.pgm.domain import Domain  # noqa: E402
from app.pgm.estimation import fit  # noqa: E402
from app.pgm.measurement import Measurement  # noqa: E402
from app.pgm.model import GraphicalModel  # noqa: E402


def _data_dir() -> Path:
    override = os.environ.get("PRIVQ_SHARED_DATA")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _load_measurements(data: Path) -> tuple[Domain, list[Measurement]]:
    domain = Domain.from_sizes(json.loads((data / "adult-domain.json").read_text()))
    with np.load(data / "adult-measurements-sigma10.npz") as archive:
        sigma = float(archive["sigma"])
        measurements = [
            Measurement(tuple(key.split("|")), archive[key], "gaussian", sigma)
            for key in archive.files
            if key != "sigma"
        ]
    return domain, measurements


def _l2(model: GraphicalModel, measurements: list[Measurement]) -> float:
    total = 0.0
    for m in measurements:
        residual = model.marginal(m.attributes).ravel() - m.values
        total += float(residual @ residual)
    return total


def _true_probabilities(records: np.ndarray, domain: Domain, attrs: tuple[str, ...]) -> np.ndarray:
    columns = [records[:, domain.index(a)] for a in attrs]
    counts = np.bincount(
        np.ravel_multi_index(columns, domain.shape(attrs)), minlength=domain.cells(attrs)
    )
    return counts.reshape(domain.shape(attrs)) / counts.sum()


def main() -> None:
    data = _data_dir()
    domain, measurements = _load_measurements(data)
    model, record = fit(domain, measurements)
    seconds_to_fit = _seconds_since_process_start()
    peak_after_fit = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    l2 = _l2(model, measurements)
    sigma2 = measurements[0].scale ** 2  # every measurement has the same σ here

    # Per-solver speed and progress. Losses reported by mirror descent and dual averaging
    # belong to consistent marginals (the model's, or dual averaging's average), so
    # L2 = 2σ²·loss; ADMM's per-iteration loss is at an inconsistent iterate, so its
    # L2-at-k comes from separate fits capped at k iterations.
    seconds_per_iteration: dict[str, float] = {}
    l2_at_iterations: dict[str, dict[str, float]] = {}
    best_l2 = l2
    for solver, cap in (("mirror_descent", 5000), ("dual_averaging", 5000)):
        stamps: list[float] = []
        _, rec = fit(
            domain,
            measurements,
            solver=solver,
            max_iterations=cap,
            tolerance=0.0,
            callback=lambda i, v, stamps=stamps: stamps.append(time.perf_counter()),
        )
        seconds_per_iteration[solver] = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
        l2_at_iterations[solver] = {
            str(k): 2 * sigma2 * rec.losses[k - 1] for k in (100, 1000, cap) if k <= len(rec.losses)
        }
        best_l2 = min(best_l2, 2 * sigma2 * rec.final_loss)
    stamps = []
    tight_model, tight = fit(
        domain,
        measurements,
        tolerance=1e-9,
        max_iterations=20000,
        callback=lambda i, v: stamps.append(time.perf_counter()),
    )
    seconds_per_iteration["admm"] = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    best_l2 = min(best_l2, _l2(tight_model, measurements))
    l2_at_iterations["admm"] = {
        str(k): _l2(fit(domain, measurements, max_iterations=k, tolerance=0.0)[0], measurements)
        for k in (25, 50, 100)
    }
    l2_at_iterations["admm"][str(tight.iterations)] = _l2(tight_model, measurements)

    # The same answers read as Laplace (b = σ/√2, same variance): the L1 path of ADMM.
    as_laplace = [
        Measurement(m.attributes, m.values, "laplace", m.scale / np.sqrt(2)) for m in measurements
    ]
    _, laplace_record = fit(domain, as_laplace)

    # Three-way marginals against the data.
    records = np.loadtxt(data / "adult.csv", delimiter=",", skiprows=1, dtype=np.int64)
    triples = list(itertools.combinations(domain.attributes, 3))
    cold_model = GraphicalModel.from_bytes(model.to_bytes())
    started = time.perf_counter()
    answers = [cold_model.marginal(t) for t in triples]
    triples_per_second_cold = len(triples) / (time.perf_counter() - started)
    one_way = {}
    for m in measurements:
        if len(m.attributes) == 1:
            clipped = np.maximum(m.values, 0.0)
            one_way[m.attributes[0]] = clipped / clipped.sum()
    tv_model, tv_independent = [], []
    for triple, answer in zip(triples, answers, strict=True):
        truth = _true_probabilities(records, domain, triple)
        tv_model.append(0.5 * float(np.abs(answer / answer.sum() - truth).sum()))
        a, b, c = (one_way[name] for name in triple)
        product = a[:, None, None] * b[None, :, None] * c[None, None, :]
        tv_independent.append(0.5 * float(np.abs(product - truth).sum()))

    result = {
        "seconds_to_fit": round(seconds_to_fit, 3),
        "within_1pct": bool(l2 <= 1.01 * best_l2),
        "l2": round(l2, 1),
        "best_l2": round(best_l2, 1),
        "solver": record.solver,
        "iterations": record.iterations,
        "fit_seconds_in_process": round(record.seconds, 3),
        "seconds_per_iteration": {k: round(v, 6) for k, v in seconds_per_iteration.items()},
        "l2_at_iterations": {
            s: {k: round(v, 1) for k, v in table.items()} for s, table in l2_at_iterations.items()
        },
        "tv_3way": round(float(np.mean(tv_model)), 4),
        "tv_3way_independent": round(float(np.mean(tv_independent)), 4),
        "triples_per_second_cold": round(triples_per_second_cold, 1),
        "laplace_admm": {
            "seconds": round(laplace_record.seconds, 3),
            "iterations": laplace_record.iterations,
            "converged": laplace_record.converged,
        },
        "model_cells": record.model_cells,
        "cliques": len(model.cliques),
        "peak_memory_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_memory_mb_after_fit": round(peak_after_fit, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
