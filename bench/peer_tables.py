"""Tables of bench/peers.py: Adult, the generated bench tables and public tables that
ship inside Python packages (no network at run time).

Every table is returned as integer codes 0..n−1 per column with the column sizes (the
domain the systems are told, the same for all of them).

Discretisation of the public tables (one rule for every column, documented in
docs/mechanisms.md): a column with at most `MAX_CATEGORIES` distinct values keeps them
as categories, in sorted order; a numeric column with more becomes `NUMERIC_BINS`
equal-frequency bins (edges at the 1/8, …, 7/8 quantiles of its values, repeated
edges merged). A missing value is a category of its own, after the others. The bench
uses the data's own quantiles for the edges: a curator would take them from the
schema; it is the same domain for every system compared.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from app.pgm.domain import Domain

MAX_CATEGORIES = 12
NUMERIC_BINS = 8

BENCH = Path(__file__).resolve().parent


def _encode(column: Any) -> tuple[np.ndarray, int]:
    """(codes, size) of one pandas column under the discretisation rule."""
    import pandas as pd

    missing = column.isna().to_numpy()
    present = column[~missing]
    values = sorted(present.unique().tolist())
    numeric = pd.api.types.is_numeric_dtype(column)
    codes = np.zeros(len(column), dtype=np.int64)
    if len(values) <= MAX_CATEGORIES or not numeric:
        position = {v: i for i, v in enumerate(values)}
        codes[~missing] = [position[v] for v in present.tolist()]
        size = len(values)
    else:
        inner = np.quantile(
            present.to_numpy(dtype=float), np.arange(1, NUMERIC_BINS) / NUMERIC_BINS
        )
        edges = np.unique(inner)
        codes[~missing] = np.searchsorted(edges, present.to_numpy(dtype=float), side="right")
        size = len(edges) + 1
    if missing.any():
        codes[missing] = size
        size += 1
    return codes, max(size, 1)


def _from_frame(frame: Any) -> tuple[Domain, np.ndarray]:
    names, columns, sizes = [], [], []
    for name in frame.columns:
        codes, size = _encode(frame[name])
        names.append(str(name))
        columns.append(codes)
        sizes.append(size)
    return Domain(tuple(names), tuple(sizes)), np.stack(columns, axis=1)


def _public(name: str) -> Any:
    """The public table `name` as a pandas frame (from the package that ships it)."""
    if name == "penguins":
        import palmerpenguins

        return palmerpenguins.load_penguins()
    if name in SKLEARN:
        from sklearn import datasets

        frame = getattr(datasets, SKLEARN[name])(as_frame=True).frame
        frame["target"] = frame["target"].astype(str)  # the class, a category
        return frame
    import statsmodels.api as sm

    frame = getattr(sm.datasets, name).load_pandas().data
    if name == "anes96":
        frame = frame.drop(columns=["logpopul"])  # log of `popul`: the same column twice
    return frame


# name -> what it is (for the output)
PUBLIC = {
    "penguins": "palmerpenguins: 344 rows x 8, missing values",
    "fair": "statsmodels fair: 6,366 rows x 9",
    "randhie": "statsmodels randhie: 20,190 rows x 10",
    "anes96": "statsmodels anes96: 944 rows x 10",
    "iris": "scikit-learn iris: 150 rows x 5",
    "wine": "scikit-learn wine: 178 rows x 14",
    "breast-cancer": "scikit-learn breast cancer: 569 rows x 31",
}
# the scikit-learn tables: name -> its loader in sklearn.datasets
SKLEARN = {"iris": "load_iris", "wine": "load_wine", "breast-cancer": "load_breast_cancer"}


def load_table(name: str, rows: int | None = None) -> tuple[Domain, np.ndarray]:
    """Adult (`adult`, or `adult-6k`: the tests' 6,000-row copy), a generated bench
    table (bench/aim.py's GENERATED) or a public table (`PUBLIC`)."""
    sys.path.insert(0, str(BENCH))
    from aim import GENERATED, load_adult, load_dataset

    if name == "adult":
        domain, data = load_adult()
    elif name == "adult-6k":
        folder = BENCH.parent / "tests" / "data"
        sizes = json.loads((folder / "adult-domain.json").read_text())
        with open(folder / "adult.csv") as handle:
            header = handle.readline().strip().split(",")
        data = np.loadtxt(folder / "adult.csv", delimiter=",", skiprows=1, dtype=np.int64)
        domain = Domain(tuple(header), tuple(int(sizes[a]) for a in header))
    elif name in GENERATED:
        return load_dataset(name, rows)
    elif name in PUBLIC:
        domain, data = _from_frame(_public(name))
    else:
        raise SystemExit(f"unknown table {name}")
    if rows is not None and rows < data.shape[0]:
        data = data[np.random.default_rng(0).permutation(data.shape[0])[:rows]]
    return domain, data
