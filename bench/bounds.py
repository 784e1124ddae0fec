"""Benchmark: what guaranteed bounds cost a SUM/AVG/VAR/STDDEV answer, in-process.

A generated model (seeded numpy potentials, no data, no noise) over two 10-value
categorical attributes and one numeric attribute of `--bins` equal bins, cliques
(a, x) and (b, x), as the service holds a loaded version. Each question is answered
repeatedly for `--seconds`, through the same service calls as `POST /sql` and
`POST /queries` (`answers.sql_answer`, `answers.queries_answer`):

- `sql_avg`: `SELECT a, b, AVG(x) … GROUP BY a, b` (bounds from two edge sums);
- `sql_avg_stddev`: the same with `STDDEV(x)` (bounds from each group's bin counts: the
  least and greatest variance per group);
- `moments`: `{"by": {"a": "value", "b": "value"}, "moments": {"x": 2}}`.

Only the service calls are timed: run it on two builds to see what the bounds add
(the script uses nothing a build without bounds lacks). Prints one JSON line with
milliseconds per answer and the load average before the run.

    .venv/bin/python bench/bounds.py [--seconds 3] [--bins 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from app.pgm.domain import Domain
from app.pgm.model import GraphicalModel
from app.schema import parse_schema
from app.services.answers import queries_answer, sql_answer
from app.services.answers.queries import QuerySpec
from app.services.models import LoadedModel

TABLE = "t"
MAX_CELLS = 1_000_000


def _loaded(bins: int, seed: int) -> LoadedModel:
    schema = parse_schema(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": [str(i) for i in range(10)]},
                {"name": "b", "type": "categorical", "values": [str(i) for i in range(10)]},
                {"name": "x", "type": "numeric", "bins": [10 * i for i in range(bins + 1)]},
            ]
        }
    )
    domain = Domain(("a", "b", "x"), (10, 10, bins))
    rng = np.random.default_rng(seed)
    cliques = (("a", "x"), ("b", "x"))
    potentials = {c: rng.normal(size=domain.shape(c)) for c in cliques}
    model = GraphicalModel(domain, cliques, potentials, 100_000.0)
    return LoadedModel(
        dataset_id="bench",
        version=1,
        model=model,
        schema=schema,
        fitted_at=datetime.now(UTC),
        solver="bench",
        iterations=0,
        loss=0.0,
        seconds=0.0,
        cliques=cliques,
        high_water=0,
        measurements=(),
    )


def _milliseconds(call: Callable[[], Any], seconds: float) -> float:
    call()  # warm the plan caches
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        count += 1
    return round(1000.0 * (time.perf_counter() - start) / count, 3)


def _build() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--bins", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    loaded = _loaded(args.bins, args.seed)
    questions: dict[str, Callable[[], Any]] = {
        "sql_avg": lambda: sql_answer(
            loaded,
            f"SELECT a, b, AVG(x) FROM {TABLE} GROUP BY a, b",
            table_names=(TABLE,),
            max_cells=MAX_CELLS,
        ),
        "sql_avg_stddev": lambda: sql_answer(
            loaded,
            f"SELECT a, b, AVG(x), STDDEV(x) FROM {TABLE} GROUP BY a, b",
            table_names=(TABLE,),
            max_cells=MAX_CELLS,
        ),
        "moments": lambda: queries_answer(
            loaded,
            [QuerySpec(by={"a": "value", "b": "value"}, moments={"x": 2})],
            max_cells=MAX_CELLS,
        ),
    }
    load = os.getloadavg()[0]
    figures = {f"{name}_ms": _milliseconds(call, args.seconds) for name, call in questions.items()}
    print(
        json.dumps(
            {
                "bench": "bounds",
                "build": _build(),
                "bins": args.bins,
                "groups": 100,
                "load_average": round(load, 2),
                **figures,
            }
        )
    )


if __name__ == "__main__":
    main()
