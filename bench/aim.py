"""Benchmark: AIM vs MWEM+PGM vs one-way marginals on Adult, ε = 1, δ = 1e-9.

ρ comes from the tight CKS conversion (`rho_from_epsilon`), or is given (`--rho`).
The workload is every 2-way marginal. For each mechanism: wall time per run and the
mean workload total-variation error of the fitted model, ‖M_r(D) − M_r(p̂)‖₁ / 2N
averaged over the workload; median over `--seeds` runs. The seeds only shuffle the
workload order: the noise and the selections come from OpenDP's cryptographic RNG,
which cannot be seeded, so every run draws fresh noise. Each run is a fresh process
(spawned one at a time), so its wall time and peak RSS are its own; times exclude
reading the CSV (~1 s). Prints ONE JSON line.

    .venv/bin/python bench/aim.py [--seeds 5] [--mwem-rounds 30] [--only aim,mwem,oneway]
        [--dataset survey] [--rho 0.5]

Each mechanism's summary also lists every run's seconds and its final fit's seconds,
share of the run and iterations.

Data: ../shared/data/adult.csv (+ adult-domain.json) relative to the repository, or
the directory in $PRIVQ_SHARED_DATA.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import numpy as np

from app.pgm.domain import Domain
from app.privacy.accounting import rho_from_epsilon, smallest_scale_for_rho
from app.privacy.mechanisms import MechanismOptions, run_aim, run_mwem
from app.privacy.mechanisms.aim import PAPER_SCHEDULE
from app.privacy.mechanisms.engine import MechanismRun


def data_dir() -> Path:
    override = os.environ.get("PRIVQ_SHARED_DATA")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load_adult() -> tuple[Domain, np.ndarray]:
    folder = data_dir()
    sizes = json.loads((folder / "adult-domain.json").read_text())
    with open(folder / "adult.csv") as handle:
        header = handle.readline().strip().split(",")
    columns = np.loadtxt(folder / "adult.csv", delimiter=",", skiprows=1, dtype=np.int64)
    domain = Domain(tuple(header), tuple(int(sizes[a]) for a in header))
    return domain, columns


# Generated tables (bench/scale_data.py), so nothing is tuned to Adult alone:
# name -> (make_network keyword arguments, default rows)
GENERATED: dict[str, tuple[dict, int]] = {  # type: ignore[type-arg]
    # wide binary data: 40 binary attributes
    "wide-binary": ({"attributes": 40, "min_size": 2, "max_size": 2, "window": 6}, 50_000),
    # skewed high-cardinality columns: 14 attributes of 12-40 values, Zipf-like conditionals
    "skewed": (
        {"attributes": 14, "min_size": 12, "max_size": 40, "skewed_share": 0.5, "window": 4},
        50_000,
    ),
    # small N: 15 attributes of 2-20 values, 2,000 rows
    "small-n": ({"attributes": 15, "window": 4}, 2_000),
    # mid-sized: 29,000 rows, 8 attributes, three of 16 values and one of 11 (the shape of
    # a census extract whose 11-valued column has a missing code as its last value)
    "mid": (
        {"sizes": [16, 16, 11, 16, 6, 3, 9, 2], "skewed_share": 0.5, "window": 4},
        29_000,
    ),
    # the shape of bench/scale.py: 40 attributes of 2-20 values
    "scale": ({"attributes": 40}, 100_000),
}
# bench/survey_data.py: 336,000 rows, 13 attributes of 3-24 values, missing values in
# five columns, skewed numeric bins (the shape of the table behind the final-fit figures)
DATASETS = ("adult", *GENERATED, "survey")


def load_dataset(name: str, rows: int | None, seed: int = 7) -> tuple[Domain, np.ndarray]:
    """Adult, or a table drawn from one of the GENERATED networks (`rows` of it)."""
    if name == "adult":
        return load_adult()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if name == "survey":
        from survey_data import load

        return load(rows, seed)
    from scale_data import make_network

    options, default_rows = GENERATED[name]
    network = make_network(seed=seed, **options)
    data = network.sample(rows or default_rows, np.random.default_rng(seed + 1))
    return Domain(tuple(network.names), tuple(network.sizes)), data.astype(np.int64)


def marginal_function(domain: Domain, data: np.ndarray):  # type: ignore[no-untyped-def]
    def true_marginal(attrs: tuple[str, ...]) -> np.ndarray:
        idx = [domain.index(a) for a in attrs]
        flat = np.ravel_multi_index(tuple(data[:, i] for i in idx), domain.shape(attrs))
        return np.bincount(flat, minlength=domain.cells(attrs))

    return true_marginal


def workload_tv(domain, model, true_marginal, workload, rows: int) -> float:  # type: ignore[no-untyped-def]
    errors = []
    for r in workload:
        estimate = np.asarray(model.marginal(r), dtype=float).ravel()
        errors.append(np.abs(true_marginal(r) - estimate).sum() / (2.0 * rows))
    return float(np.mean(errors))


def run_oneway(domain, true_marginal, rho, options):  # type: ignore[no-untyped-def]
    """Every one-way marginal with an equal share of ρ, then one fit (same engine)."""
    run = MechanismRun("oneway", domain, true_marginal, rho, {}, options=options)
    sigma = smallest_scale_for_rho(Fraction(rho / len(domain)))
    for a in domain.attributes:
        with run.access("measure", sigma, 0.0):
            run.measure("measure", (a,), sigma, 0.0)
    run.refit()
    return run.finish()


def run_one(kind: str, seed: int, rho: float, args: dict) -> dict:  # type: ignore[type-arg]
    """One mechanism run in a fresh process: wall time, workload TV, rounds, ρ, peak RSS."""
    domain, data = load_dataset(args["dataset"], args["rows"])
    rows = data.shape[0]
    truth = marginal_function(domain, data)
    base_workload = list(combinations(domain.attributes, 2))
    order = np.random.default_rng(seed).permutation(len(base_workload))
    workload = [base_workload[i] for i in order]
    tuning = args["tuning"]
    t0 = time.perf_counter()
    progress = None
    if args["verbose"]:

        def progress(p):  # type: ignore[no-untyped-def]
            if p.stage == "measured":
                print(
                    f"[{kind} seed {seed}] round {p.round_index} {p.attributes} "
                    f"ρ {p.rho_used:.5f}/{p.rho_total:.5f} t={time.perf_counter() - t0:.1f}s",
                    file=sys.stderr,
                    flush=True,
                )

    if kind == "aim":
        options = MechanismOptions(max_model_cells=args["max_model_cells"], **tuning)
        result = run_aim(domain, truth, rho, workload, options=options, on_progress=progress)
    elif kind == "mwem":
        options = MechanismOptions(
            max_model_cells=args["max_model_cells"], rounds=args["mwem_rounds"], **tuning
        )
        result = run_mwem(domain, truth, rho, workload, options=options, on_progress=progress)
    elif kind == "oneway":
        result = run_oneway(
            domain, truth, rho, MechanismOptions(max_model_cells=args["max_model_cells"])
        )
    else:
        raise SystemExit(f"unknown mechanism {kind}")
    seconds = time.perf_counter() - t0
    tv = workload_tv(domain, result.model, truth, base_workload, rows)
    outcome = {
        "seconds": seconds,
        "tv": tv,
        "rounds": len(result.rounds),
        "rho_used": result.rho_used,
        "model_cells": result.fit.model_cells,
        "final_fit_seconds": result.fit.seconds,
        "final_fit_iterations": result.fit.iterations,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if args["verbose"]:
        print(f"[{kind} seed {seed}] {json.dumps(outcome)}", file=sys.stderr, flush=True)
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--rho", type=float, default=None, help="zCDP ρ (instead of ε, δ)")
    parser.add_argument("--mwem-rounds", type=int, default=30)
    parser.add_argument("--max-model-cells", type=int, default=10**7)
    parser.add_argument("--only", default="aim,mwem,oneway")
    parser.add_argument("--fit-iterations", type=int, default=None, help="per-round fit iterations")
    parser.add_argument("--final-fit-iterations", type=int, default=None)
    parser.add_argument("--fit-solver", default=None, help="solver of the fits between rounds")
    parser.add_argument("--round-tolerance", type=float, default=None)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument(
        "--paper",
        action="store_true",
        help="AIM with the paper's schedule (no init_share, filter; T = 16·d)",
    )
    parser.add_argument("--dataset", default="adult", choices=DATASETS)
    parser.add_argument("--rows", type=int, default=None, help="rows of a generated dataset")
    args = parser.parse_args()

    tuning = {}
    if args.fit_iterations is not None:
        tuning["fit_iterations"] = args.fit_iterations
    if args.final_fit_iterations is not None:
        tuning["final_fit_iterations"] = args.final_fit_iterations
    if args.round_tolerance is not None:
        tuning["round_fit_tolerance"] = args.round_tolerance
    if args.fit_solver is not None:
        tuning["fit_solver"] = args.fit_solver
    if args.paper:
        tuning |= PAPER_SCHEDULE
    shared = {
        "tuning": tuning,
        "verbose": args.verbose,
        "max_model_cells": args.max_model_cells,
        "mwem_rounds": args.mwem_rounds,
        "dataset": args.dataset,
        "rows": args.rows,
    }
    started = time.perf_counter()
    rho = args.rho if args.rho is not None else rho_from_epsilon(args.epsilon, args.delta)
    kinds = [k for k in args.only.split(",") if k]
    results: dict[str, list[dict]] = {k: [] for k in kinds}  # type: ignore[type-arg]
    # Each run in its own fresh process, one at a time: clean timings and per-run peak memory.
    context = multiprocessing.get_context("spawn")
    for seed in range(args.seeds):
        for kind in kinds:
            with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                results[kind].append(pool.submit(run_one, kind, seed, rho, shared).result())

    summary: dict[str, object] = {
        "bench": "aim",
        "dataset": args.dataset,
        "rows": args.rows,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "rho": rho,
        "rho_given": args.rho is not None,
        "workload": "all 2-way marginals",
        "aim_schedule": "paper" if args.paper else "privq",
        "seeds": args.seeds,
        "noise": "OpenDP (unseedable): fresh noise every run; seeds permute the workload order",
        "tv": "mean over the workload of |true - model| / 2N, median over seeds",
    }
    for kind in kinds:
        runs = results[kind]
        summary[kind] = {
            "median_tv": statistics.median(r["tv"] for r in runs),
            "tv": [round(r["tv"], 5) for r in runs],
            "median_seconds": statistics.median(r["seconds"] for r in runs),
            "max_seconds": max(r["seconds"] for r in runs),
            "rounds": [r["rounds"] for r in runs],
            "model_cells": [r["model_cells"] for r in runs],
            "max_rho_used_over_charge": max(r["rho_used"] / rho for r in runs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "seconds": [round(r["seconds"], 1) for r in runs],
            "final_fit_seconds": [round(r["final_fit_seconds"], 1) for r in runs],
            "final_fit_share": [round(r["final_fit_seconds"] / r["seconds"], 3) for r in runs],
            "final_fit_iterations": [r["final_fit_iterations"] for r in runs],
        }
    if "aim" in kinds and "oneway" in kinds:
        summary["aim_over_oneway"] = summary["aim"]["median_tv"] / summary["oneway"]["median_tv"]  # type: ignore[index]
    if "aim" in kinds and "mwem" in kinds:
        summary["aim_over_mwem"] = summary["aim"]["median_tv"] / summary["mwem"]["median_tv"]  # type: ignore[index]
    summary["total_seconds"] = time.perf_counter() - started
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
