"""Benchmark: privq's AIM against the peers' AIMs and the one-way baseline, side by side.

Systems, all at the same ρ on the same table, domain and workload:

- `privq`: app.privacy.mechanisms.run_aim in-process, default options (`--options`
  overrides them, for privq and privq-paper);
- `privq-paper`: the same with the paper's schedule (`aim.PAPER_SCHEDULE`: no
  one-way share of its own, no noise filter, T = 16·d);
- `privq-full`: privq's AIM without coarse forms (`coarse_groups = None`: every
  candidate a full marginal), to compare the two in one run of the bench;
- `oneway`: every one-way marginal with an equal share of ρ, one fit (the baseline);
  with `--estimator stein`, these four are refitted with the "stein" estimator, as the
  service refits a dataset set to it;
- `snsynth`: SmartNoise Synth's AIM (`snsynth.aim.AIMSynthesizer.AIM`, called on the
  integer-coded table with its ρ set to ours: its own ε→ρ conversion differs);
- `opendp`: OpenDP's AIM (`opendp.extras.mbi.AIM` through `make_contingency_table`
  with every column keyed, pure ρ-zCDP; it spends half of ρ on one-way marginals).

Error: the mean over the workload of the total variation ‖M_r(D) − M_r(model)‖₁ / 2N of
each system's fitted model (not a synthetic sample), per run; the table prints the
median, minimum, maximum and interquartile range (`iqr_tv`) over `--seeds` runs and the
median wall time, and where the error comes from: the median TV of the system's one-way
marginals (`median_oneway_tv`) and of the model made of them alone, their product
(`median_independent_tv`; the system's error is below it by what its measured pairs
taught the model). Every run is a fresh process (spawned one at a time). The peers draw
their noise from OpenDP's unseedable RNG as privq does: a seed only permutes the
workload order.

ρ: `rho_from_epsilon(ε, δ)` (app.privacy.accounting), ε = 1 and δ = 1e-6 by default.
Workload: every marginal of `--degrees` attributes (default "2,3": all 2-way and 3-way
marginals). Tables (bench/peer_tables.py): adult, adult-6k, the generated skewed,
wide-binary, small-n, mid (and scale) tables of bench/aim.py, and the public penguins, fair,
randhie, anes96 (statsmodels), iris, wine and breast-cancer (scikit-learn). Prints one
JSON line per table and system, then a summary line with, per table, privq's median
over the best peer's, over the one-way baseline's and over privq-full's, each with a 90%
bootstrap interval.

    .venv/bin/pip install -e '.[bench]'   # opendp[mbi] (mbi, jax), statsmodels, ...
    .venv/bin/pip install --no-deps smartnoise-synth==1.0.8 smartnoise-sql==1.0.10 \\
        antlr4-python3-runtime==4.9.3 graphviz Faker 'disjoint-set<0.10' PyYAML
    .venv/bin/python bench/peers.py --tables small-n,penguins --seeds 3

(SmartNoise Synth pins opendp < 0.15 and opacus/torch for its other synthesizers; its
AIM needs neither, hence `--no-deps`; smartnoise-sql imports PyYAML, which `.[bench]`
does not bring.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

SYSTEMS = ("privq", "privq-paper", "privq-full", "oneway", "snsynth", "opendp")


def _workload(attributes: tuple[str, ...], degrees: list[int]) -> list[tuple[str, ...]]:
    return [c for k in degrees for c in combinations(attributes, min(k, len(attributes)))]


def bench_table(table: str, degrees: list[int], seed: int, rows: int | None = None):  # type: ignore[no-untyped-def]
    """(domain, data, true-marginal function, workload, the workload in seed's order) of a
    table of bench/peer_tables.py: every run of every bench on it starts here."""
    from aim import marginal_function
    from peer_tables import load_table

    domain, data = load_table(table, rows)
    truth = marginal_function(domain, data)
    workload = _workload(domain.attributes, degrees)
    order = np.random.default_rng(seed).permutation(len(workload))
    return domain, data, truth, workload, [workload[i] for i in order]


def _run_privq(domain, data, truth, rho, workload, system, overrides, estimator):  # type: ignore[no-untyped-def]
    from aim import run_oneway

    from app.pgm.estimation import DEFAULT_ESTIMATOR, fit
    from app.privacy.mechanisms import MechanismOptions, run_aim
    from app.privacy.mechanisms.aim import PAPER_SCHEDULE

    if system == "oneway":
        result = run_oneway(domain, truth, rho, MechanismOptions())
    else:
        # privq-paper: the paper's schedule (aim.PAPER_SCHEDULE); privq-full: no coarse forms
        base = {
            "privq-paper": PAPER_SCHEDULE,
            "privq-full": {"coarse_groups": None},
        }.get(system, {})
        options = MechanismOptions(**(base | overrides))  # type: ignore[arg-type]
        result = run_aim(domain, truth, rho, workload, options=options)
    model = result.model
    if estimator != DEFAULT_ESTIMATOR:
        # what the service does for a dataset with another estimator: refit the same
        # measurements with it (from the mechanism's own mle fit)
        model = fit(domain, result.measurements, estimator=estimator, warm_start=model)[0]
    return lambda attrs: np.asarray(model.marginal(attrs), dtype=float).ravel()


def _run_snsynth(domain, data, rho, workload):  # type: ignore[no-untyped-def]
    import contextlib
    import io

    import pandas as pd
    from mbi import Dataset
    from mbi import Domain as MbiDomain
    from snsynth.aim import AIMSynthesizer

    synth = AIMSynthesizer(epsilon=1.0, delta=1e-6)
    synth.rho = rho  # what its fit() would set from its own ε→ρ conversion
    names = list(domain.attributes)
    table = Dataset(pd.DataFrame(data, columns=names), MbiDomain(names, list(domain.sizes)))
    with contextlib.redirect_stdout(io.StringIO()):
        synth.AIM(table, [tuple(w) for w in workload])
    model = synth.synthesizer
    return lambda attrs: np.asarray(model.project(attrs).datavector(), dtype=float)


def _run_opendp(domain, data, rho, workload):  # type: ignore[no-untyped-def]
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    names = list(domain.attributes)
    frame = pl.DataFrame({n: data[:, i].astype(np.int64) for i, n in enumerate(names)})
    context = dp.Context.compositor(
        data=frame.lazy(),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(rho=rho),
    )
    keys = {n: list(range(size)) for n, size in zip(names, domain.sizes, strict=True)}
    queries = [dp.mbi.Count(tuple(w)) for w in workload]
    release = (
        context.query(rho=rho)
        .contingency_table(keys=keys, algorithm=dp.mbi.AIM(queries=queries))
        .release()
    )
    sizes = dict(zip(names, domain.sizes, strict=True))

    def estimate(attrs: tuple[str, ...]) -> np.ndarray:
        # every key set ends with a null category (no row has it): left out
        counts = np.asarray(release.project(list(attrs)), dtype=float)
        return counts[tuple(slice(0, sizes[a]) for a in attrs)].ravel()

    return estimate


def run_one(system: str, table: str, seed: int, rho: float, args: dict[str, Any]) -> dict:  # type: ignore[type-arg]
    """One system on one table in a fresh process: wall time and workload TV."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    domain, data, truth, workload, shuffled = bench_table(
        table, args["degrees"], seed, args["rows"]
    )
    started = time.perf_counter()
    if system in ("privq", "privq-paper", "privq-full", "oneway"):
        estimate = _run_privq(
            domain, data, truth, rho, shuffled, system, args["options"], args["estimator"]
        )
    elif system == "snsynth":
        estimate = _run_snsynth(domain, data, rho, shuffled)
    elif system == "opendp":
        estimate = _run_opendp(domain, data, rho, shuffled)
    else:
        raise SystemExit(f"unknown system {system}")
    seconds = time.perf_counter() - started
    rows = data.shape[0]

    def tv(attrs: tuple[str, ...], counts: np.ndarray) -> float:
        return float(np.abs(truth(attrs) - counts).sum() / (2.0 * rows))

    def independent(attrs: tuple[str, ...]) -> np.ndarray:
        """The product of the system's own one-way marginals, scaled to N."""
        product = np.ones(1)
        for a in attrs:
            one = np.clip(estimate((a,)), 0.0, None)
            product = np.outer(product, one / max(one.sum(), 1e-12)).ravel()
        return rows * product

    return {
        "tv": float(np.mean([tv(w, estimate(w)) for w in workload])),
        "oneway_tv": float(np.mean([tv((a,), estimate((a,))) for a in domain.attributes])),
        "independent_tv": float(np.mean([tv(w, independent(w)) for w in workload])),
        "seconds": seconds,
    }


def iqr(values: list[float]) -> float:
    """Interquartile range (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    first, _, third = statistics.quantiles(values, n=4, method="inclusive")
    return third - first


def ratio_interval(mine: list[float], theirs: list[float], draws: int = 4000) -> list[float]:
    """90% bootstrap interval of median(mine) / median(theirs), each resampled from its
    own runs (how far a few runs' medians can be trusted)."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(mine), np.asarray(theirs)
    ratios = [
        np.median(rng.choice(a, a.size)) / np.median(rng.choice(b, b.size)) for _ in range(draws)
    ]
    return [round(float(q), 3) for q in np.quantile(ratios, [0.05, 0.95])]


def iqr_ratio_interval(mine: list[float], theirs: list[float], draws: int = 4000) -> list[float]:
    """90% bootstrap interval of iqr(mine) / iqr(theirs), resampled as `ratio_interval`
    does: whether one system's runs spread wider than another's beyond what a few runs'
    interquartile ranges can tell apart (draws with a zero range left out; [] if all)."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(mine), np.asarray(theirs)
    ratios = []
    for _ in range(draws):
        spread = iqr(list(rng.choice(b, b.size)))
        if spread > 0.0:
            ratios.append(iqr(list(rng.choice(a, a.size))) / spread)
    if not ratios:
        return []
    return [round(float(q), 3) for q in np.quantile(ratios, [0.05, 0.95])]


def main() -> None:
    from app.privacy.accounting import rho_from_epsilon

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", default="small-n,penguins,fair,anes96")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--peer-seeds", type=int, default=None, help="runs of snsynth and opendp (default --seeds)"
    )
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--degrees", default="2,3", help="workload: all k-way marginals, k in")
    parser.add_argument("--rows", type=int, default=None, help="rows of each table (subsample)")
    parser.add_argument(
        "--options",
        type=json.loads,
        default={},
        help="MechanismOptions fields for privq, privq-paper and privq-full, as JSON: "
        "'{\"noise_filter\": 2}'",
    )
    parser.add_argument(
        "--estimator",
        default="mle",
        help="the dataset estimator privq's systems and oneway are fitted with (mle, stein)",
    )
    args = parser.parse_args()
    rho = rho_from_epsilon(args.epsilon, args.delta)
    shared = {
        "rows": args.rows,
        "degrees": [int(k) for k in args.degrees.split(",")],
        "options": args.options,
        "estimator": args.estimator,
    }
    context = multiprocessing.get_context("spawn")
    summary: dict[str, Any] = {"bench": "peers", "epsilon": args.epsilon, "delta": args.delta}
    summary |= {"rho": rho, "degrees": args.degrees, "seeds": args.seeds}
    summary |= {"options": args.options, "estimator": args.estimator, "tables": {}}
    for table in args.tables.split(","):
        medians: dict[str, float] = {}
        samples: dict[str, list[float]] = {}
        for system in args.systems.split(","):
            runs = []
            peer = system in ("snsynth", "opendp")
            for seed in range(args.peer_seeds if peer and args.peer_seeds else args.seeds):
                with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                    runs.append(pool.submit(run_one, system, table, seed, rho, shared).result())
            tvs = [r["tv"] for r in runs]
            line = {
                "table": table,
                "system": system,
                "median_tv": statistics.median(tvs),
                "min_tv": min(tvs),
                "max_tv": max(tvs),
                # the runs' spread: the range grows with the number of runs, the
                # interquartile range does not
                "iqr_tv": iqr(tvs),
                "tv": [round(t, 5) for t in tvs],
                "median_seconds": statistics.median(r["seconds"] for r in runs),
                # where the error comes from: the one-way marginals, and the model made
                # of them alone (above `median_tv` when measured pairs helped)
                "median_oneway_tv": statistics.median(r["oneway_tv"] for r in runs),
                "median_independent_tv": statistics.median(r["independent_tv"] for r in runs),
            }
            print(json.dumps(line), flush=True)
            medians[system] = line["median_tv"]
            samples[system] = tvs
        peers = [s for s in ("snsynth", "opendp") if s in medians]
        entry: dict[str, Any] = dict(medians)
        if "privq" in medians and peers:
            best = min(peers, key=lambda s: medians[s])
            entry["privq_over_best_peer"] = medians["privq"] / medians[best]
            entry["privq_over_best_peer_90"] = ratio_interval(samples["privq"], samples[best])
            # the spread: privq's interquartile range over the best peer's
            if iqr(samples[best]) > 0.0:
                entry["privq_iqr_over_best_peer"] = iqr(samples["privq"]) / iqr(samples[best])
                entry["privq_iqr_over_best_peer_90"] = iqr_ratio_interval(
                    samples["privq"], samples[best]
                )
        if "privq" in medians and "oneway" in medians:
            entry["privq_over_oneway"] = medians["privq"] / medians["oneway"]
            entry["privq_over_oneway_90"] = ratio_interval(samples["privq"], samples["oneway"])
        if "privq" in medians and "privq-full" in medians:
            entry["privq_over_full"] = medians["privq"] / medians["privq-full"]
            entry["privq_over_full_90"] = ratio_interval(samples["privq"], samples["privq-full"])
        summary["tables"][table] = entry
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
