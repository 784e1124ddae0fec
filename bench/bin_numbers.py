"""Benchmark: the average of a skewed numeric attribute from the model, with bin
midpoints and with measured within-bin means, against the truth; and what the
within-bin means cost in ρ.

The table is drawn by tests/data/make_delays.py (`build(rows=--rows)`): flight
departure delays, most a few minutes early, a third late with a long right tail, in
wide bins [-30, 0, 30, 120, 600]. It is uploaded to a fresh SQLite database through
the HTTP API (in process), the one-way marginal of `dep_delay` is measured at
`--rho-counts` (the counts every answer weights bins by), then the within-bin means of
`dep_delay` at `--rho` (default 0.5) `--repeats` times, each a release of its own; the
worker runs the jobs as the service does. Each release's AVG is
Σ n̂_b · mean_b / Σ n̂_b with the model's counts n̂_b, mean_b = low + width ·
clip(S_b / n̂_b, 0, 1) (`app.services.within_bin_means.means_from`); the midpoints'
AVG uses the same counts. Relative errors are |estimate − truth| / |truth|, and the
median over the releases is printed with the worst. `answered` is what the service
itself answers to `SELECT AVG(dep_delay)` once every release is in (they are combined
by inverse-variance weights), with its estimate's method and bounds.

The median is the service's own answer to `SELECT MEDIAN(dep_delay)` (the model's
counts over the bins; within the median's bin, the spread of the bin's measured mean,
`app.sql.spread`), with the bin it lies in, against the true median; and, from the same
counts, the median with each bin spread uniformly (as without within-bin means).

Prints ONE JSON line. (Not named numbers.py: a script's folder comes first on
`sys.path`, so a bench/numbers.py would hide the standard library's `numbers` from
every other script here.)

    .venv/bin/python bench/bin_numbers.py [--rows 200000] [--rho 0.5] [--repeats 5]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "data"))
sys.path.insert(0, str(ROOT))

from make_delays import DELAY_EDGES, SCHEMA, build, to_csv  # noqa: E402

from app.config import Settings  # noqa: E402
from app.database import Database  # noqa: E402
from app.db import MeasurementRecord  # noqa: E402
from app.ingest import unpack_column  # noqa: E402
from app.migrations import upgrade_to_head  # noqa: E402
from app.worker import Worker  # noqa: E402

ADMIN_KEY = "bench-admin-key-" + "x" * 32


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rho", type=float, default=0.5, help="ρ of one within-bin release")
    parser.add_argument("--rho-counts", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from app.api import create_app

    columns = build(rows=args.rows)
    truth = float(np.mean(columns["dep_delay"]))
    edges = np.asarray(DELAY_EDGES)
    lows, highs = edges[:-1], edges[1:]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/bench.db"
        upgrade_to_head(url)
        database = Database(url)
        settings = Settings(
            database_url=url,
            admin_key=ADMIN_KEY,
            env="test",
            workers_in_process=0,
            auto_migrate=False,
        )
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        with TestClient(create_app(settings, database=database)) as client:
            tenant = client.post("/v1/tenants", json={"name": "bench"}, headers=admin).json()
            headers = {"Authorization": f"Bearer {tenant['api_key']}"}
            upload = client.post(
                "/v1/datasets",
                data={"schema": json.dumps(SCHEMA), "name": "delays"},
                files={"file": ("delays.csv", io.BytesIO(to_csv(columns).encode()), "text/csv")},
                headers=admin,
            )
            upload.raise_for_status()
            dataset_id = upload.json()["id"]
            total = args.rho_counts + args.rho * args.repeats
            client.post(
                f"/v1/datasets/{dataset_id}/grants",
                json={"tenant_id": tenant["id"], "rho": total},
                headers=admin,
            ).raise_for_status()
            measurements = f"/v1/datasets/{dataset_id}/measurements"
            client.post(
                measurements,
                json={"marginals": [["dep_delay"]], "rho": args.rho_counts},
                headers=headers,
            ).raise_for_status()
            for _ in range(args.repeats):
                client.post(
                    measurements,
                    json={"within_bin_means": ["dep_delay"], "rho": args.rho},
                    headers=headers,
                ).raise_for_status()
            Worker(database, settings, poll_seconds=0.01).run_until_idle()
            marginal = client.get(
                f"/v1/datasets/{dataset_id}/marginals",
                params={"attrs": "dep_delay"},
                headers=headers,
            ).json()
            answered = client.post(
                f"/v1/datasets/{dataset_id}/sql",
                json={"query": 'SELECT AVG(dep_delay) AS mean FROM "delays"'},
                headers=headers,
            ).json()
            median = client.post(
                f"/v1/datasets/{dataset_id}/sql",
                json={"query": 'SELECT MEDIAN(dep_delay) AS median FROM "delays"'},
                headers=headers,
            ).json()
        counts = np.asarray(marginal["counts"], dtype=np.float64)
        with database.read_only() as session:
            releases = session.query(MeasurementRecord).filter_by(kind="within_bin_means").all()
            sums = [
                unpack_column(r.values).astype(np.float64) / r.details["grid"] for r in releases
            ]
        database.dispose()

    from app.services.within_bin_means import means_from

    by_midpoints = float(counts @ ((lows + highs) / 2) / counts.sum())
    by_means = [float(counts @ means_from(lows, highs, s, counts) / counts.sum()) for s in sums]
    errors = [abs(v - truth) / abs(truth) for v in by_means]
    true_median = float(np.median(columns["dep_delay"]))
    answered_median = float(median["rows"][0][0])
    from app.sql.quantiles import CodeIntervals, quantile

    # The same counts, each bin spread uniformly (as without within-bin means).
    uniform = quantile(counts, CodeIntervals(lows, highs, integer=False), 0.5)
    uniform_median = float("nan") if uniform is None else uniform.value
    result: dict[str, Any] = {
        "bench": "numbers",
        "commit": commit(),
        "command": "bench/bin_numbers.py " + " ".join(sys.argv[1:]),
        "rows": args.rows,
        "bins": DELAY_EDGES,
        "truth": {"avg": round(truth, 4), "median": round(true_median, 4)},
        "avg": {
            "midpoints": round(by_midpoints, 4),
            "midpoints_rel_error": round(abs(by_midpoints - truth) / abs(truth), 5),
            "within_bin_means": [round(v, 4) for v in by_means],
            "within_bin_means_rel_error_median": round(statistics.median(errors), 5),
            "within_bin_means_rel_error_max": round(max(errors), 5),
            "answered": round(answered["rows"][0][0], 4),
            "answered_estimate": answered["estimates"][0],
            "answered_bounds": [round(b, 4) for b in answered["bounds"][0][0]],
            "answered_rel_error": round(abs(answered["rows"][0][0] - truth) / abs(truth), 5),
        },
        "median": {
            "answered": round(answered_median, 4),
            "bin": median["bins"][0][0],
            "abs_error": round(abs(answered_median - true_median), 4),
            "uniform_spread": round(uniform_median, 4),
            "uniform_spread_abs_error": round(abs(uniform_median - true_median), 4),
        },
        "rho_within_bin_means": args.rho,
        "rho_counts": args.rho_counts,
        "releases": len(sums),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
