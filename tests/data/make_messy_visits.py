"""Writes `messy_visits.parquet`: a small made-up table of clinic visits, messy the way
real exports are. Run from the repository root: `python tests/data/make_messy_visits.py`.

300 persons with 1 to 4 visits each (about 2 on average, 600 rows or so); `person_id`
is the privacy unit. Missing values in several columns, each its own way: `age` unknown
for some persons (all their rows), `income` null on about 15% of rows, `smoker` text
with empty cells and "NA", `children` unknown on some rows; `visit` and `region` are
always filled. Drawn from a seeded generator: the same file every time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PERSONS = 300
OUT = Path(__file__).with_name("messy_visits.parquet")


def build(seed: int = 2026) -> pa.Table:
    rng = np.random.default_rng(seed)
    visits = rng.choice([1, 2, 3, 4], size=PERSONS, p=[0.35, 0.35, 0.2, 0.1])
    person = np.repeat(np.arange(PERSONS), visits)
    rows = person.size
    age = rng.integers(18, 91, PERSONS).astype(float)
    age[rng.random(PERSONS) < 0.08] = np.nan  # unknown for the person: every row
    region = rng.choice(["north", "south", "east", "west"], PERSONS, p=[0.4, 0.3, 0.2, 0.1])
    income = np.round(rng.lognormal(10.3, 0.6, PERSONS), -2)
    smoker = rng.choice(["yes", "no"], PERSONS, p=[0.25, 0.75])
    children = rng.poisson(1.2, PERSONS).clip(0, 6)
    visit = np.where(
        age[person] > 60,
        rng.choice(["checkup", "chronic", "acute"], rows, p=[0.3, 0.5, 0.2]),
        rng.choice(["checkup", "chronic", "acute"], rows, p=[0.5, 0.1, 0.4]),
    )
    smoker_cell = smoker[person].astype(object)
    blank = rng.random(rows)
    smoker_cell[blank < 0.06] = ""
    smoker_cell[(blank >= 0.06) & (blank < 0.1)] = "NA"
    income_cell = income[person]
    income_missing = rng.random(rows) < 0.15
    children_missing = rng.random(rows) < 0.1
    return pa.table(
        {
            "person_id": pa.array([f"P{p:05d}" for p in person]),
            "visit": pa.array(visit.tolist()),
            "age": pa.array(age[person]),  # NaN where unknown
            "region": pa.array(region[person].tolist()).dictionary_encode(),
            "income": pa.array(income_cell.tolist(), mask=income_missing),
            "smoker": pa.array(smoker_cell.tolist(), pa.string()),
            "children": pa.array(children[person].tolist(), pa.int64(), mask=children_missing),
        }
    )


if __name__ == "__main__":
    pq.write_table(build(), OUT, row_group_size=256, compression="zstd")
    print(f"wrote {OUT}")
