"""Benchmark: what the bench tables allow without noise, the floors of `bench/peers.py`.

For each table, the workload TV (every 2-way marginal unless `--degrees` says otherwise)
of two models fitted by app.pgm to exact marginals: the independence model (every
one-way marginal) and the Chow–Liu tree (the one-way marginals and the 2-way marginals
of the maximum spanning tree of the pairs' mutual information). A private mechanism
whose error is near the first has learnt nothing beyond the one-way marginals; the gap
between the two is what measured pairs could win, were they measured without noise.
Prints one JSON line per table.

    .venv/bin/python bench/floors.py --tables penguins,small-n,anes96,fair,skewed
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
from scipy.sparse.csgraph import minimum_spanning_tree

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aim import marginal_function
from peer_tables import load_table
from peers import _workload

from app.pgm.estimation import fit
from app.pgm.measurement import Measurement


def mutual_information(joint: np.ndarray) -> float:
    p = joint / joint.sum()
    outer = p.sum(axis=1, keepdims=True) @ p.sum(axis=0, keepdims=True)
    seen = p > 0
    return float((p[seen] * np.log(p[seen] / outer[seen])).sum())


def floors(table: str, degrees: list[int]) -> dict[str, object]:
    domain, data = load_table(table, None)
    truth = marginal_function(domain, data)
    rows = data.shape[0]
    names = domain.attributes
    workload = _workload(names, degrees)

    def error(measured: list[tuple[str, ...]]) -> float:
        # exact marginals: any small noise scale weighs them alike
        exact = [Measurement(r, truth(r), "gaussian", 1.0) for r in measured]
        model, _ = fit(domain, exact, max_iterations=2000)
        return float(
            np.mean(
                [
                    np.abs(truth(w) - np.asarray(model.marginal(w)).ravel()).sum() / (2.0 * rows)
                    for w in workload
                ]
            )
        )

    k = len(names)
    information = np.zeros((k, k))
    for i, j in combinations(range(k), 2):
        joint = truth((names[i], names[j])).reshape(domain.sizes[i], domain.sizes[j])
        information[i, j] = mutual_information(joint.astype(float))
    tree = minimum_spanning_tree(-information).toarray()
    edges = [(names[i], names[j]) for i, j in zip(*np.nonzero(tree), strict=True)]
    oneway = [(a,) for a in names]
    return {
        "table": table,
        "rows": rows,
        "independence_tv": error(oneway),
        "tree_tv": error(oneway + edges),
        "tree": [list(e) for e in edges],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", default="small-n,penguins,fair,anes96")
    parser.add_argument("--degrees", default="2", help="workload: all k-way marginals, k in")
    args = parser.parse_args()
    degrees = [int(d) for d in args.degrees.split(",")]
    for table in args.tables.split(","):
        print(json.dumps(floors(table, degrees)), flush=True)


if __name__ == "__main__":
    main()
