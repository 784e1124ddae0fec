"""Benchmark: all 3-way marginals of an Adult-shaped model, from a cold start.

Builds a model over Adult's domain (shared/data/adult-domain.json) whose cliques are
the junction tree of the attribute sets measured in adult-measurements-sigma10.npz,
with random log-potentials, then times answering every 3-way marginal (364 of them)
including the first calibration; then the same again with plans cached, a batch of
evidence counts through `answer_many`, and synthetic sampling. Prints one JSON line.

    .venv/bin/python bench/inference.py
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import numpy as np

from app.pgm import queries as q
from app.pgm.domain import Domain
from app.pgm.junction_tree import build_junction_tree
from app.pgm.model import GraphicalModel
from app.pgm.queries import FactoredQuery

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def adult_shaped_model(seed: int = 0) -> GraphicalModel:
    sizes = json.loads((DATA / "adult-domain.json").read_text())
    domain = Domain.from_sizes(sizes)
    with np.load(DATA / "adult-measurements-sigma10.npz", allow_pickle=False) as archive:
        attr_sets = [key.split("|") for key in archive.files if key != "sigma"]
    tree = build_junction_tree(domain, attr_sets)
    rng = np.random.default_rng(seed)
    potentials = {c: rng.normal(scale=1.0, size=domain.shape(c)) for c in tree.cliques}
    return GraphicalModel(domain, tree.cliques, potentials, total=48842.0)


def main() -> None:
    model = GraphicalModel.from_bytes(adult_shaped_model().to_bytes())  # nothing cached
    domain = model.domain
    triples = list(itertools.combinations(domain.attributes, 3))
    start = time.perf_counter()
    cells = 0
    for triple in triples:
        cells += model.marginal(triple).size
    cold = time.perf_counter() - start

    start = time.perf_counter()
    for triple in triples:
        model.marginal(triple)
    warm = time.perf_counter() - start

    # A batch of evidence counts: every 2-way cell (a = i, b = j) of 20 attribute pairs.
    pairs = list(itertools.combinations(domain.attributes, 2))[:20]
    counts = [
        FactoredQuery.of(domain, q.indicator(domain, a, [i]), q.indicator(domain, b, [j]))
        for a, b in pairs
        for i in range(min(domain.size_of(a), 5))
        for j in range(min(domain.size_of(b), 5))
    ]
    start = time.perf_counter()
    model.answer_many(counts)
    batch = time.perf_counter() - start

    rows = 200_000
    start = time.perf_counter()
    model.sample(rows=rows, seed=0)
    sampling = time.perf_counter() - start

    widths = [model.plan(t).max_intermediate_cells for t in triples]
    print(
        json.dumps(
            {
                "benchmark": "adult_three_way_marginals_cold",
                "cliques": len(model.cliques),
                "model_cells": sum(domain.cells(c) for c in model.cliques),
                "queries": len(triples),
                "answer_cells": cells,
                "seconds": round(cold, 4),
                "queries_per_second": round(len(triples) / cold, 1),
                "warm_queries_per_second": round(len(triples) / warm, 1),
                "max_intermediate_cells": max(widths),
                "batched_count_queries": len(counts),
                "batched_counts_per_second": round(len(counts) / batch, 1),
                "sampled_rows_per_second": round(rows / sampling, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
