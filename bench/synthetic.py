"""Synthetic records by rounding vs i.i.d. sampling: 2-way TV against the model; one JSON line.

Two models:
- "test": a test-sized model — 6 attributes (2..5 values), noisy Laplace measurements of
  correlated records (the fixture of tests/pgm/test_pgm_rounding.py, seeded).
- "adult": Private-PGM fitted to Adult's 24 Gaussian measurements (σ = 10) from
  /work/shared/data (or $PRIVQ_SHARED_DATA); the data itself gives a second reference.

For each, N̂ records are made by `method=round` and `method=sample` (same seed), and for
every pair of attributes the total-variation distance between the records' 2-way table
and the model's is computed; the table reports the mean over all pairs, over the pairs
inside one clique of the model, and over the others (and, for Adult, against the data).
Streaming: rows per second and peak traced memory of 1,000,000 Adult records made chunk
by chunk (never concatenated) by each method in the same run, next to the size of such a
table.

Run: .venv/bin/python bench/synthetic.py [--skip-adult]
"""

from __future__ import annotations

import os

# One BLAS thread, as privq's processes run (app/cli.py).
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

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


def _table(records: np.ndarray, domain: Domain, attrs: tuple[str, ...]) -> np.ndarray:
    flat = np.ravel_multi_index(
        tuple(records[:, domain.index(a)] for a in attrs), domain.shape(attrs)
    )
    counts = np.bincount(flat, minlength=domain.cells(attrs)).reshape(domain.shape(attrs))
    return counts / max(counts.sum(), 1)


def test_model() -> GraphicalModel:
    domain = Domain(("a", "b", "c", "d", "e", "f"), (3, 4, 2, 5, 3, 2))
    rng = np.random.default_rng(11)
    data = rng.integers(0, domain.sizes, size=(4000, len(domain)))
    data[:2000, 1] = data[:2000, 0]
    data[:2500, 3] = (data[:2500, 2] + data[:2500, 1]) % 5
    data[1000:3000, 4] = data[1000:3000, 3] % 3
    sets = [("a", "b"), ("b", "c", "d"), ("d", "e"), ("a", "e")]
    measurements = [
        Measurement(
            s,
            4000 * _table(data, domain, s).ravel() + rng.laplace(0, 3.0, domain.cells(s)),
            "laplace",
            3.0,
        )
        for s in sets
    ]
    model, _ = fit(domain, measurements)
    return model


def adult_model(data: Path) -> tuple[GraphicalModel, np.ndarray]:
    domain = Domain.from_sizes(json.loads((data / "adult-domain.json").read_text()))
    with np.load(data / "adult-measurements-sigma10.npz") as archive:
        sigma = float(archive["sigma"])
        measurements = [
            Measurement(tuple(key.split("|")), archive[key], "gaussian", sigma)
            for key in archive.files
            if key != "sigma"
        ]
    records = np.loadtxt(data / "adult.csv", delimiter=",", skiprows=1, dtype=np.int64)
    model, _ = fit(domain, measurements)
    return model, records


def compare(model: GraphicalModel, seed: int, data: np.ndarray | None = None) -> dict[str, object]:
    domain = model.domain
    rows = model.default_rows()
    made: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    for method in ("round", "sample"):
        chunks = model.rounded_chunks if method == "round" else model.sample_chunks
        started = time.perf_counter()
        made[method] = np.concatenate(list(chunks(rows, seed)))
        seconds[method] = time.perf_counter() - started
    cliques = [set(c) for c in model.cliques]
    result: dict[str, object] = {"rows": rows, "seconds": seconds}
    for reference in ("model", "data"):
        if reference == "data" and data is None:
            continue
        inside: dict[str, list[float]] = {"round": [], "sample": [], "model": []}
        outside: dict[str, list[float]] = {"round": [], "sample": [], "model": []}
        for pair in itertools.combinations(domain.attributes, 2):
            if reference == "model":
                target = model.probabilities(pair)
            else:
                assert data is not None
                target = _table(data, domain, pair)
            bucket = inside if any(set(pair) <= c for c in cliques) else outside
            for method, records in made.items():
                tv = 0.5 * float(np.abs(_table(records, domain, pair) - target).sum())
                bucket[method].append(tv)
            if reference == "data":
                bucket["model"].append(
                    0.5 * float(np.abs(model.probabilities(pair) - target).sum())
                )
        summary = {}
        for method in ("round", "sample", "model"):
            values = inside[method] + outside[method]
            if not values:
                continue
            summary[method] = {
                "all_pairs": float(np.mean(values)),
                "pairs_in_a_clique": float(np.mean(inside[method])) if inside[method] else None,
                "other_pairs": float(np.mean(outside[method])) if outside[method] else None,
                "pairs": [len(inside[method]), len(outside[method])],
            }
        result[f"tv_vs_{reference}"] = summary
    return result


def streaming(model: GraphicalModel, rows: int = 1_000_000) -> dict[str, float]:
    """Rows per second of both methods and the peak traced memory of rounding, in one run."""
    figures: dict[str, float] = {"rows": rows}
    for method in ("round", "sample"):
        chunks = model.rounded_chunks if method == "round" else model.sample_chunks
        tracemalloc.start()
        started = time.perf_counter()
        seen = 0
        for chunk in chunks(rows, 0, chunk_rows=20_000):
            seen += len(chunk)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        figures[f"{method}_rows_per_second"] = seen / elapsed
        figures[f"{method}_peak_traced_mb"] = peak / 2**20
    figures["full_table_mb"] = rows * len(model.domain) * 8 / 2**20
    return figures


def _print(name: str, result: dict[str, object]) -> None:
    for key in ("tv_vs_model", "tv_vs_data"):
        summary = result.get(key)
        if not isinstance(summary, dict):
            continue
        for method, figures in summary.items():
            print(
                f"{name:6} {key:12} {method:7} all {figures['all_pairs']:.4f}  "
                f"in-clique {figures['pairs_in_a_clique'] or float('nan'):.4f}  "
                f"other {figures['other_pairs'] or float('nan'):.4f}  "
                f"(pairs {figures['pairs'][0]} + {figures['pairs'][1]})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-adult", action="store_true")
    args = parser.parse_args()
    out: dict[str, object] = {"bench": "synthetic"}
    model = test_model()
    out["test"] = compare(model, args.seed)
    _print("test", out["test"])  # type: ignore[arg-type]
    if not args.skip_adult:
        adult, records = adult_model(_data_dir())
        out["adult"] = compare(adult, args.seed, records)
        _print("adult", out["adult"])  # type: ignore[arg-type]
        out["streaming_adult"] = streaming(adult)
        print("streaming 1M Adult records:", out["streaming_adult"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
