"""Benchmark: time from POST /measurements to job succeeded, with 24 measurements in the model.

`privq serve` (temporary SQLite file, embedded worker process, loopback only) holds
Adult with the engine benchmark's 24 fixed σ = 10 measurements already fitted
(model version 1, seeded through the services as in bench/queries.py). Then, one at a
time, a tenant POSTs one 2-way Gaussian measurement and polls GET /v1/jobs/{id} every
10 ms until it succeeds: each fit is warm-started from the previous version and covers
25, 26, … measurements. Prints one JSON line: the median and every run, and the
server-side split (measure → fit) read from the model versions.

    .venv/bin/python bench/measure.py [--runs 5] [--poll 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from queries import Server, seed_fixed_measurements, setup_over_api

NEW_PAIRS = [
    ("workclass", "education-num"),
    ("race", "sex"),
    ("hours-per-week", "sex"),
    ("age", "marital-status"),
    ("native-country", "income>50K"),
    ("occupation", "sex"),
    ("relationship", "income>50K"),
    ("fnlwgt", "income>50K"),
    ("workclass", "occupation"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--poll",
        type=float,
        default=0.05,
        help="the embedded worker's idle poll interval (PRIVQ_WORKER_POLL_SECONDS)",
    )
    args = parser.parse_args()
    if not 1 <= args.runs <= len(NEW_PAIRS):
        parser.error(f"--runs must be 1..{len(NEW_PAIRS)}")
    os.environ["PRIVQ_WORKER_POLL_SECONDS"] = str(args.poll)
    with tempfile.TemporaryDirectory(prefix="privq-bench-measure-") as tmp:
        server = Server(Path(tmp), embedded_worker=True)
        try:
            server.wait_ready()
            info = setup_over_api(server, grant_rho=10.0)
            seed_fixed_measurements(server.database_url, info["tenant_id"], info["dataset_id"])
            headers = {"Authorization": f"Bearer {info['api_key']}"}
            base = f"/v1/datasets/{info['dataset_id']}"
            runs = []
            with httpx.Client(base_url=server.url, headers=headers, timeout=120.0) as client:
                for pair in NEW_PAIRS[: args.runs]:
                    started = time.perf_counter()
                    accepted = client.post(
                        f"{base}/measurements",
                        json={"marginals": [list(pair)], "noise": "gaussian", "sigma": 10},
                    )
                    accepted.raise_for_status()
                    job_id = accepted.json()["job_id"]
                    while True:
                        job = client.get(f"/v1/jobs/{job_id}").json()
                        if job["status"] in ("succeeded", "failed"):
                            break
                        time.sleep(0.01)
                    elapsed = time.perf_counter() - started
                    if job["status"] != "succeeded":
                        raise RuntimeError(f"job failed: {job['error']}")
                    model = client.get(f"{base}/model").json()
                    runs.append(
                        {
                            "pair": list(pair),
                            "seconds": round(elapsed, 3),
                            "fit_seconds": round(model.get("fit_seconds", float("nan")), 3),
                            "fit_iterations": model.get("iterations"),
                            "model_version": job["model_version"],
                            "measurements_in_model": model.get("measurement_count"),
                        }
                    )
        finally:
            server.stop()
    print(
        json.dumps(
            {
                "post_to_succeeded_seconds_median": statistics.median(r["seconds"] for r in runs),
                "fit_seconds_median": statistics.median(r["fit_seconds"] for r in runs),
                "worker_poll_seconds": args.poll,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
