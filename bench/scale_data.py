"""Synthetic tables drawn from a known Bayesian network, with exact population marginals.

Used by bench/scale.py (2,000,000 rows × 40 attributes through the service) and
bench/aim.py (AIM on tables other than Adult). A `Network` is a DAG over attributes in
topological order; each attribute has at most `max_parents` parents among the
`window` attributes before it and a conditional probability table (CPT) drawn from a
Dirichlet around a base distribution — uniform-ish, or Zipf-skewed for the
"skewed high-cardinality" attributes, whose rare values are what makes a marginal hard.

Attributes come in three kinds, as a curator's schema has them: categorical (string
labels), integer (codes written as numbers) and numeric (values inside bin edges; the
service bins them). `exact_marginal` is the population distribution of any attribute
set, by variable elimination over the CPTs of the set's ancestors (descendants sum
out), so the error of a fitted model is measured against the truth, not the sample.

    .venv/bin/python bench/scale_data.py --rows 1000 --out /tmp/t.csv   # write a table
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.pgm.elimination import eliminate

KINDS = ("categorical", "integer", "numeric")
# Distinct written values per numeric bin (so the service parses real decimals).
NUMERIC_VALUES_PER_BIN = 8
# Largest family (attribute + parents) table a generated network has.
MAX_FAMILY_CELLS = 2000


@dataclass
class Network:
    """A Bayesian network over named attributes (topological order) with its CPTs."""

    names: list[str]
    kinds: list[str]
    sizes: list[int]
    parents: list[tuple[int, ...]]
    cpts: list[np.ndarray]  # axes: the parents' (in order), then the attribute's own
    bins: dict[int, list[float]] = field(default_factory=dict)  # numeric attributes

    def __len__(self) -> int:
        return len(self.names)

    def families(self) -> list[tuple[str, ...]]:
        """Each attribute with its parents (parents first): what the network factorises over."""
        return [
            (*(self.names[p] for p in parents), self.names[i])
            for i, parents in enumerate(self.parents)
        ]

    def schema(self) -> dict[str, Any]:
        """The curator's schema in the API's full form."""
        attributes: list[dict[str, Any]] = []
        for i, (name, kind, size) in enumerate(
            zip(self.names, self.kinds, self.sizes, strict=True)
        ):
            if kind == "categorical":
                attributes.append(
                    {"name": name, "type": kind, "values": [f"{name}-v{k}" for k in range(size)]}
                )
            elif kind == "integer":
                attributes.append({"name": name, "type": kind, "size": size})
            else:
                attributes.append({"name": name, "type": kind, "bins": self.bins[i]})
        return {"attributes": attributes}

    def sizes_by_name(self) -> dict[str, int]:
        return dict(zip(self.names, self.sizes, strict=True))

    # -- sampling ----------------------------------------------------------------------

    def sample(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        """rows × attributes integer codes (uint8), drawn forward through the network."""
        codes = np.empty((rows, len(self)), dtype=np.uint8)
        for i, parents in enumerate(self.parents):
            table = self.cpts[i].reshape(-1, self.sizes[i])
            if parents:
                shape = tuple(self.sizes[p] for p in parents)
                row = np.ravel_multi_index(tuple(codes[:, p] for p in parents), shape)
            else:
                row = np.zeros(rows, dtype=np.intp)
            cumulative = np.cumsum(table, axis=1)
            cumulative[:, -1] = 1.0
            u = rng.random(rows)
            # inverse CDF per row: how many cumulative values lie below u
            codes[:, i] = (u[:, None] > cumulative[row]).sum(axis=1)
        return codes

    # -- the population ----------------------------------------------------------------

    def ancestors(self, attrs: Iterable[int]) -> list[int]:
        found: set[int] = set()
        stack = list(attrs)
        while stack:
            i = stack.pop()
            if i not in found:
                found.add(i)
                stack.extend(self.parents[i])
        return sorted(found)

    def exact_marginal(self, attrs: Sequence[str]) -> np.ndarray:
        """The population distribution of `attrs` (axes in the order given, sums to 1)."""
        index = [self.names.index(a) for a in attrs]
        needed = self.ancestors(index)
        factors = [((*self.parents[i], i), self.cpts[i]) for i in needed]
        return eliminate(factors, index)


def _base_distribution(size: int, skewed: bool, rng: np.random.Generator) -> np.ndarray:
    if skewed:
        weights = 1.0 / np.arange(1, size + 1) ** 1.6
        rng.shuffle(weights)
    else:
        weights = rng.uniform(0.5, 1.5, size)
    return weights / weights.sum()


def make_network(
    attributes: int = 40,
    *,
    seed: int = 7,
    min_size: int = 2,
    max_size: int = 20,
    max_parents: int = 2,
    window: int = 6,
    skewed_share: float = 0.2,
    concentration: float = 0.3,
    sizes: Sequence[int] | None = None,
) -> Network:
    """A random network: kinds cycle categorical/integer/numeric; some large attributes skewed.

    `concentration` scales the Dirichlet around each base distribution: smaller means
    conditionals further from the base, i.e. stronger dependence on the parents.
    """
    rng = np.random.default_rng(seed)
    if sizes is None:
        sizes = [int(rng.integers(min_size, max_size + 1)) for _ in range(attributes)]
    sizes = list(sizes)
    names = [f"a{i:02d}" for i in range(len(sizes))]
    kinds = [KINDS[i % 3] for i in range(len(sizes))]
    parents: list[tuple[int, ...]] = []
    cpts: list[np.ndarray] = []
    bins: dict[int, list[float]] = {}
    for i, size in enumerate(sizes):
        skewed = size >= 12 and rng.random() < 2 * skewed_share
        base = _base_distribution(size, skewed, rng)
        pool = list(range(max(0, i - window), i))
        rng.shuffle(pool)
        chosen: list[int] = []
        wanted = int(rng.integers(0 if i < 2 else 1, max_parents + 1))
        for p in pool:
            if len(chosen) == wanted:
                break
            if size * math.prod(sizes[q] for q in [*chosen, p]) <= MAX_FAMILY_CELLS:
                chosen.append(p)
        chosen.sort()
        parent_cells = math.prod(sizes[p] for p in chosen)
        table = rng.dirichlet(concentration * size * base, size=parent_cells)
        cpts.append(table.reshape(*(sizes[p] for p in chosen), size))
        parents.append(tuple(chosen))
        if kinds[i] == "numeric":
            widths = rng.uniform(0.5, 3.0, size)
            edges = np.concatenate([[0.0], np.cumsum(widths)]) * 10.0
            bins[i] = [round(float(e), 3) for e in edges]
    return Network(names, kinds, sizes, parents, cpts, bins)


# -- the CSV -------------------------------------------------------------------------------


def _cell_pools(network: Network, rng: np.random.Generator) -> list[np.ndarray]:
    """Per attribute, a (size × k) table of the strings a code may be written as."""
    pools = []
    for i, (name, kind, size) in enumerate(
        zip(network.names, network.kinds, network.sizes, strict=True)
    ):
        if kind == "categorical":
            pool = np.array([[f"{name}-v{k}"] for k in range(size)], dtype=object)
        elif kind == "integer":
            pool = np.array([[str(k)] for k in range(size)], dtype=object)
        else:
            edges = network.bins[i]
            pool = np.empty((size, NUMERIC_VALUES_PER_BIN), dtype=object)
            for k in range(size):
                low, high = edges[k], edges[k + 1]
                inside = rng.uniform(low + 0.05 * (high - low), high - 0.05 * (high - low), 8)
                pool[k] = [f"{v:.3f}" for v in inside]
        pools.append(pool)
    return pools


def write_csv(
    network: Network, path: Path, rows: int, *, seed: int = 11, chunk_rows: int = 100_000
) -> np.ndarray:
    """Stream `rows` sampled records to `path`; returns the codes (rows × attributes, uint8)."""
    rng = np.random.default_rng(seed)
    pools = _cell_pools(network, rng)
    codes = np.empty((rows, len(network)), dtype=np.uint8)
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(",".join(network.names) + "\n")
        for start in range(0, rows, chunk_rows):
            n = min(chunk_rows, rows - start)
            chunk = network.sample(n, rng)
            codes[start : start + n] = chunk
            columns = []
            for i, pool in enumerate(pools):
                pick = rng.integers(0, pool.shape[1], n) if pool.shape[1] > 1 else 0
                columns.append(pool[chunk[:, i], pick].tolist())
            handle.write("\n".join(map(",".join, zip(*columns, strict=True))) + "\n")
    return codes


def empirical_marginal(codes: np.ndarray, network: Network, attrs: Sequence[str]) -> np.ndarray:
    """The sample's distribution of `attrs` (one bincount over a mixed-radix index)."""
    index = [network.names.index(a) for a in attrs]
    shape = tuple(network.sizes[i] for i in index)
    flat = np.ravel_multi_index(tuple(codes[:, i].astype(np.intp) for i in index), shape)
    counts = np.bincount(flat, minlength=math.prod(shape)).reshape(shape)
    return counts / max(codes.shape[0], 1)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """½‖p − q‖₁ of two distributions (each normalised here)."""
    p = np.asarray(p, dtype=float).ravel()
    q = np.asarray(q, dtype=float).ravel()
    return 0.5 * float(np.abs(p / max(p.sum(), 1e-300) - q / max(q.sum(), 1e-300)).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--attributes", type=int, default=40)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    network = make_network(args.attributes)
    write_csv(network, args.out, args.rows)
    args.out.with_suffix(".schema.json").write_text(json.dumps(network.schema()))


if __name__ == "__main__":
    main()
