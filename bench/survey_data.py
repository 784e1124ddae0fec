"""A generated survey-shaped table: 336,000 rows, 13 attributes of 3–24 values.

The shape of the table behind AIM's final-fit figures (docs/benchmarks.md): a few
hundred thousand rows, a dozen attributes of 3 to 24 values, missing values in five
columns and numeric columns binned from skewed (log-normal) values, so most of their
rows fall in the first few bins. Drawn deterministically from a seed:

- the categorical core is a random Bayesian network (`scale_data.make_network`, its
  sizes fixed here, half of the large attributes Zipf-skewed);
- three numeric columns are log-normal values whose location depends on a network
  attribute, cut into equal-width bins (the last bin open), so their bins are skewed;
- five columns have a missing code (their last value), more likely for some values of
  another attribute than others (missing at random, not completely at random).

Nothing here is committed data: `load` builds the table in about a second.
"""

from __future__ import annotations

import numpy as np

from app.pgm.domain import Domain

ROWS = 336_000
# The categorical core's sizes, before missing codes (numeric columns come after them).
CORE_SIZES = (4, 23, 7, 12, 3, 16, 9, 5, 20, 6)
# Numeric columns: (bins, the core attribute their location follows).
NUMERIC = ((10, 1), (14, 5), (8, 8))
# Columns with a missing code: (column index, core attribute it depends on, base rate).
MISSING = ((2, 0, 0.04), (3, 4, 0.10), (7, 2, 0.02), (10, 6, 0.15), (12, 3, 0.06))


def load(rows: int | None = None, seed: int = 7) -> tuple[Domain, np.ndarray]:
    """The table as (domain, rows × 13 int64 codes); the same for the same seed."""
    from scale_data import make_network

    rows = rows or ROWS
    network = make_network(
        seed=seed, sizes=CORE_SIZES, window=4, skewed_share=0.5, concentration=0.3
    )
    rng = np.random.default_rng(seed + 1)
    core = network.sample(rows, rng).astype(np.int64)
    columns = [core[:, i] for i in range(core.shape[1])]
    sizes = list(CORE_SIZES)
    for bins, parent in NUMERIC:
        location = rng.normal(0.0, 0.6, CORE_SIZES[parent])[core[:, parent]]
        values = rng.lognormal(location, 0.9)
        width = np.quantile(values, 0.995) / bins
        columns.append(np.minimum((values // width).astype(np.int64), bins - 1))
        sizes.append(bins)
    for column, parent, base in MISSING:
        # a missing rate per value of `parent`: from a fifth to three times the base rate
        rates = base * rng.uniform(0.2, 3.0, CORE_SIZES[parent])
        missing = rng.random(rows) < rates[core[:, parent]]
        columns[column] = np.where(missing, sizes[column], columns[column])
        sizes[column] += 1
    names = tuple(f"s{i:02d}" for i in range(len(sizes)))
    return Domain(names, tuple(sizes)), np.stack(columns, axis=1)
