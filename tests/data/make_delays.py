"""Writes `delays.csv`: a small made-up table of flight departures, shaped like the
public on-time tables: most flights leave a few minutes early or on time, a third are
late, and the lateness has a long right tail. Run from the repository root:
`python tests/data/make_delays.py` (a seeded generator: the same file every time).

Columns: `carrier` (one of five), `distance` (miles) and `dep_delay` (minutes, one
decimal; early departures negative). `SCHEMA` bins `dep_delay` the way a curator who
knows only its range would, in wide bins: midpoints put the average delay far from
the truth, within-bin means bring it back (tests/services/test_within_bin_means.py,
bench/bin_numbers.py, which draws a larger table with `build(rows=...)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ROWS = 10_000
OUT = Path(__file__).with_name("delays.csv")
CARRIERS = ["AA", "DL", "UA", "WN", "B6"]
DELAY_EDGES = [-30.0, 0.0, 30.0, 120.0, 600.0]
DISTANCE_EDGES = [0.0, 500.0, 1000.0, 2000.0, 5000.0]
SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "carrier", "type": "categorical", "values": CARRIERS},
        {"name": "distance", "type": "numeric", "bins": DISTANCE_EDGES, "clip": True},
        {"name": "dep_delay", "type": "numeric", "bins": DELAY_EDGES, "clip": True},
    ]
}


def build(rows: int = ROWS, seed: int = 43) -> dict[str, np.ndarray]:
    """The table's columns: `rows` departures from a seeded generator."""
    rng = np.random.default_rng(seed)
    carrier = rng.choice(len(CARRIERS), rows, p=[0.25, 0.25, 0.2, 0.2, 0.1])
    distance = np.clip(rng.lognormal(6.5, 0.6, rows), 50, 4900)
    late = rng.random(rows) < 0.33 + 0.04 * (carrier == 3)
    early = np.clip(rng.normal(-4.0, 3.5, rows), -29.9, 0.0)
    tail = np.minimum(rng.exponential(38.0, rows) + rng.pareto(2.5, rows) * 20.0, 590.0)
    delay = np.where(late, 0.1 + tail, early)
    return {
        "carrier": np.array(CARRIERS)[carrier],
        "distance": np.round(distance),
        "dep_delay": np.round(delay, 1),
    }


def to_csv(columns: dict[str, np.ndarray]) -> str:
    lines = ["carrier,distance,dep_delay"]
    lines += [
        f"{c},{d:.0f},{x:.1f}"
        for c, d, x in zip(
            columns["carrier"], columns["distance"], columns["dep_delay"], strict=True
        )
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(to_csv(build()))
