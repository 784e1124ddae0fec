"""Scale-out load for bench/scale.py `--workers N,…`: jobs per minute with N workers.

For each N: a fresh scratch PostgreSQL database, one API process (no embedded worker),
four datasets (the same generated table uploaded four times), then N `privq worker`
processes. Measurement requests arrive continuously: per dataset, `--inflight` jobs are
kept outstanding (a new one is posted as soon as one finishes), each a 2-way Gaussian
marginal of an attribute and its first parent in the generating network (so a model is
a tree of small cliques whose fits are quick, and measuring — reading the stored
columns and counting — is a real share of a job). After a warm-up, the jobs that
succeed during `--duration` seconds are counted; jobs/min, how many model versions the
fits made (fewer than jobs: fits coalesce), the fits' overlap per dataset (must be
none) and the workers' peak RSS are reported per N, with the cores each kind of
process kept busy over the run (CPU seconds / wall seconds: the workers, the API,
PostgreSQL, this load generator, and the whole machine) — where jobs/min stops
rising, this says whether the cores ran out.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from scale_data import Network
from scale_service import command_cpu_seconds, cpu_seconds, machine_busy_seconds

WARM_UP_SECONDS = 10.0
JOB_RHO = 0.001


def tree_pairs(network: Network) -> list[list[str]]:
    """(first parent, attribute) for every attribute with a parent: a tree's edges."""
    return [
        [network.names[parents[0]], network.names[i]]
        for i, parents in enumerate(network.parents)
        if parents
    ]


def _load(
    api: Any,
    dataset_id: str,
    pairs: list[list[str]],
    inflight: int,
    stop_at: float,
    window: tuple[float, float],
    seed: int,
    done: list[float],
) -> None:
    rng = random.Random(seed)
    pending: list[str] = []
    while time.monotonic() < stop_at:
        while len(pending) < inflight:
            body = {"marginals": [rng.choice(pairs)], "noise": "gaussian", "rho": JOB_RHO}
            pending.append(api.submit(dataset_id, "/measurements", body))
        still = []
        for job_id in pending:
            status = api.tenant.get(f"/v1/jobs/{job_id}").json()["status"]
            if status == "succeeded":
                finished = time.monotonic()
                if window[0] <= finished <= window[1]:
                    done.append(finished)
            elif status == "failed":
                raise RuntimeError(f"job {job_id} failed")
            else:
                still.append(job_id)
        pending = still
        time.sleep(0.1)


def _cpu(service: Any) -> dict[str, float]:
    return {
        "workers": service.worker_cpu_seconds(),
        "api": cpu_seconds(service.api.pid),
        "postgres": command_cpu_seconds("postgres"),
        "load_generator": cpu_seconds(os.getpid()),
        "machine": machine_busy_seconds(),
    }


def fit_overlaps(database_url: str) -> dict[str, int]:
    """Pairs of fits whose intervals overlap: within one dataset (must be 0) and across."""
    import psycopg

    with psycopg.connect(database_url) as connection:
        rows = connection.execute(
            "SELECT dataset_id, fitted_at, seconds FROM model_versions"
        ).fetchall()
    spans = [(d, at.timestamp() - seconds, at.timestamp()) for d, at, seconds in rows]
    same = across = 0
    for i, (d1, s1, e1) in enumerate(spans):
        for d2, s2, e2 in spans[i + 1 :]:
            if s1 < e2 and s2 < e1:
                if d1 == d2:
                    same += 1
                else:
                    across += 1
    return {"fits": len(spans), "overlapping_same_dataset": same, "overlapping_across": across}


def run_scale_out(
    args: argparse.Namespace,
    service_class: Any,
    api_class: Any,
    dataset_files: Callable[[argparse.Namespace], tuple[Network, Any, Any]],
) -> dict[str, Any]:
    network, csv_path, _codes = dataset_files(args)
    pairs = tree_pairs(network)
    schema = network.schema()
    results = []
    for count in [int(n) for n in args.workers.split(",")]:
        service = service_class("postgres", args.workdir, args.port, workers=0)
        try:
            service.wait_ready()
            api = api_class(service)
            datasets = [api.upload(f"load-{k}", csv_path, schema, rho=1000.0) for k in range(4)]
            service.add_workers(count)
            service.reset_peaks()
            cpu_before = _cpu(service)
            start = time.monotonic()
            window = (start + WARM_UP_SECONDS, start + WARM_UP_SECONDS + args.duration)
            done: list[float] = []
            threads = [
                threading.Thread(
                    target=_load,
                    args=(api, d, pairs, args.inflight, window[1], window, k, done),
                )
                for k, d in enumerate(datasets)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - start
            busy = {
                kind: round((after - cpu_before[kind]) / elapsed, 2)
                for kind, after in _cpu(service).items()
            }
            results.append(
                {
                    "workers": count,
                    "jobs_per_minute": round(60.0 * len(done) / args.duration, 1),
                    "jobs": len(done),
                    **fit_overlaps(service.database_url),
                    "worker_peak_mb": service.worker_peak_mb(),
                    "api_peak_mb": service.api_peak_mb(),
                    "busy_cores": busy,
                }
            )
            print(f"workers={count}: {results[-1]}", flush=True)
        finally:
            service.stop()
    return {
        "rows": args.rows,
        "duration": args.duration,
        "inflight": args.inflight,
        "runs": results,
    }
