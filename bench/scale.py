"""Benchmark: privq at scale — 2,000,000 rows × 40 attributes through a running service.

The table is drawn from a known Bayesian network (bench/scale_data.py: 40 attributes of
2–20 values, categorical / integer / numeric-with-bins, some skewed high-cardinality
ones) and written as CSV once per (rows, seed) into `--workdir` (reused after). Then,
against a real service on loopback — `privq serve` on SQLite (its embedded worker is
a child process), or with `--backend postgres` `privq serve` plus separate `privq
worker` processes on a scratch database `privq_scale` (dropped and created anew) —
each step of issue 14 is timed:

1. upload of the CSV (rows/s; peak RSS of the API process);
2. the 40 one-way Gaussian marginals (one request, ρ = `--rho`), POST → model fitted;
   then the 40 network families (one request), POST → model fitted; seconds all told,
   peak RSS of the worker;
3. free 3-way marginals against that model from one load-generator process
   (`--clients` keep-alive connections): answers/s, p50, p99;
4. synthetic data: `--synthetic-rows` rows streamed, seconds, and the API's peak RSS
   increase next to that of a 10× smaller request (flat means streaming);
5. AIM at ρ = `--rho` over a `--workload`-pair 2-way workload on a second upload of the
   same table: seconds, worker peak RSS.

Peak RSS is read from the processes themselves (/proc/<pid>/status VmHWM, reset before
each step through /proc/<pid>/clear_refs). Every fitted model's error is printed: the
mean total variation distance of its workload marginals from the generating network's
exact marginals — next to the one-way model at the same ρ (the independent baseline)
and the sample's own distance (the floor no model of this sample beats on average).

`--workers N[,N…]` instead runs the scale-out load on PostgreSQL (bench/scale_workers.py).

    .venv/bin/python bench/scale.py --rows 200000                    # SQLite, small
    .venv/bin/python bench/scale.py --backend postgres               # full size
    .venv/bin/python bench/scale.py --workers 1,2,4 --rows 100000

The machine is shared (2 cores): read times as indicative. Prints a table and ONE JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from queries import Connection, percentile  # noqa: E402  (bench/queries.py)
from scale_data import Network, empirical_marginal, make_network, total_variation, write_csv  # noqa: E402
from scale_service import Api, Service, cpu_seconds, peak_mb, reset_peak, rss_mb  # noqa: E402

# ---- steps -------------------------------------------------------------------------------


def sample_error(codes: np.ndarray, network: Network, attr_sets: list[tuple[str, ...]]) -> float:
    return round(
        float(
            np.mean(
                [
                    total_variation(
                        empirical_marginal(codes, network, a), network.exact_marginal(a)
                    )
                    for a in attr_sets
                ]
            )
        ),
        5,
    )


def step_upload(api: Api, csv_path: Path, schema: dict[str, Any], rows: int) -> tuple[str, dict]:
    service = api.service
    service.reset_peaks()
    before = rss_mb(service.api.pid)
    cpu_before = cpu_seconds(service.api.pid)
    started = time.perf_counter()
    dataset_id = api.upload("scale-a", csv_path, schema, rho=100.0)
    seconds = time.perf_counter() - started
    cpu = cpu_seconds(service.api.pid) - cpu_before
    return dataset_id, {
        "seconds": round(seconds, 2),
        "rows_per_second": round(rows / seconds),
        # the API's own CPU: on a machine shared with other work, what the upload costs
        "api_cpu_seconds": round(cpu, 2),
        "rows_per_api_cpu_second": round(rows / max(cpu, 1e-9)),
        "api_peak_mb": peak_mb(service.api.pid),
        "api_rss_before_mb": before,
    }


def step_measure(
    api: Api, dataset_id: str, network: Network, rho: float, workload: list[tuple[str, ...]]
) -> dict[str, Any]:
    service = api.service
    service.reset_peaks()
    oneway = [[a] for a in network.names]
    families = [list(f) for f in network.families()]
    timings = {}
    errors = {}
    cpu_before = service.worker_cpu_seconds()
    for name, marginals in (("oneway", oneway), ("families", families)):
        started = time.perf_counter()
        job_id = api.submit(
            dataset_id, "/measurements", {"marginals": marginals, "noise": "gaussian", "rho": rho}
        )
        job = api.wait(job_id, timeout=1800)
        timings[name] = round(time.perf_counter() - started, 2)
        if job["status"] != "succeeded":
            raise RuntimeError(f"{name} measurement job: {json.dumps(job)[:1000]}")
        errors[name] = api.model_error(dataset_id, network, workload)
        errors[name + "_families"] = api.model_error(dataset_id, network, network.families())
    return {
        "seconds": round(sum(timings.values()), 2),
        "oneway_seconds": timings["oneway"],
        "families_seconds": timings["families"],
        "worker_peak_mb": service.worker_peak_mb(),
        "worker_cpu_seconds": round(service.worker_cpu_seconds() - cpu_before, 1),
        "error": errors,
    }


async def _three_way_load(config: dict[str, Any]) -> dict[str, Any]:
    url = httpx.URL(config["url"])
    prefix = f"/v1/datasets/{config['dataset_id']}/marginals?"
    triples = [t for t in combinations(config["names"], 3)]
    deadline = time.perf_counter() + config["duration"]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    cells: list[int] = []

    async def client(seed: int) -> None:
        rng = random.Random(seed)
        connection = Connection(url.host, url.port or 80, f"Bearer {config['api_key']}")
        while time.perf_counter() < deadline:
            triple = rng.choice(triples)
            target = prefix + urlencode({"attrs": ",".join(triple)})
            started = time.perf_counter()
            try:
                status, body = await connection.request("GET", target)
                outcome = str(status)
            except (OSError, ConnectionError, asyncio.IncompleteReadError) as error:
                outcome, body = type(error).__name__, b""
                await connection.close()
            latencies.append(time.perf_counter() - started)
            if outcome != "200":
                errors[outcome] = errors.get(outcome, 0) + 1
            elif len(cells) < 200:
                cells.append(len(json.loads(body)["counts"]))
        await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(config["seed"] + i) for i in range(config["clients"])))
    elapsed = time.perf_counter() - started
    latencies_ms = [1000 * x for x in latencies]
    return {
        "answers": len(latencies),
        "answers_per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies_ms, 50), 1),
        "p99_ms": round(percentile(latencies_ms, 99), 1),
        "errors": errors,
        "mean_cells": round(float(np.mean(cells)), 1) if cells else None,
        "clients": config["clients"],
    }


def step_answers(api: Api, dataset_id: str, names: list[str], args: argparse.Namespace) -> dict:
    config = {
        "url": api.service.url,
        "dataset_id": dataset_id,
        "api_key": api.api_key,
        "names": names,
        "duration": args.answer_seconds,
        "clients": args.clients,
        "seed": 1000,
    }
    # Warm the model cache (first use of a version loads and calibrates it).
    api.tenant.get(f"/v1/datasets/{dataset_id}/marginals", params={"attrs": ",".join(names[:3])})
    cpu_before = cpu_seconds(api.service.api.pid)
    load_before = round(os.getloadavg()[0], 2)
    result = subprocess.run(
        [sys.executable, __file__, "--load-generator", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=args.answer_seconds + 120,
        check=True,
        cwd=ROOT,
    )
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    cpu = cpu_seconds(api.service.api.pid) - cpu_before
    report["api_cpu_ms_per_answer"] = round(1000 * cpu / max(report["answers"], 1), 2)
    # what one API process could serve if it had a core to itself
    report["answers_per_api_cpu_second"] = round(report["answers"] / max(cpu, 1e-9), 1)
    report["load_average_before"] = load_before
    return report


def step_synthetic(api: Api, dataset_id: str, rows: int) -> dict[str, Any]:
    pid = api.service.api.pid
    outcome: dict[str, Any] = {}
    for label, count in (("small", max(rows // 10, 1)), ("full", rows)):
        reset_peak(pid)
        before = rss_mb(pid)
        started = time.perf_counter()
        lines = 0
        with api.tenant.stream(
            "GET", f"/v1/datasets/{dataset_id}/synthetic", params={"rows": count, "seed": 1}
        ) as response:
            if response.status_code != 200:
                response.read()
                raise RuntimeError(f"synthetic: {response.status_code} {response.text[:300]}")
            for chunk in response.iter_bytes():
                lines += chunk.count(b"\n")
        outcome[label] = {
            "rows": count,
            "seconds": round(time.perf_counter() - started, 2),
            "lines": lines,
            "api_peak_increase_mb": round(peak_mb(pid) - before, 1),
        }
    return outcome


def step_aim(
    api: Api,
    csv_path: Path,
    schema: dict[str, Any],
    network: Network,
    workload: list[tuple[str, ...]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    dataset_id = api.upload("scale-aim", csv_path, schema, rho=args.rho)
    service = api.service
    service.reset_peaks()
    cpu_before = service.worker_cpu_seconds()
    started = time.perf_counter()
    body: dict[str, Any] = {"rho": args.rho, "workload": [list(w) for w in workload]}
    if args.aim_max_model_cells:
        body["max_model_cells"] = args.aim_max_model_cells
    job_id = api.submit(dataset_id, "/mechanisms/aim", body)
    job = api.wait(job_id, timeout=args.aim_timeout, verbose=args.verbose)
    seconds = time.perf_counter() - started
    outcome: dict[str, Any] = {
        "rho": args.rho,
        "max_model_cells": args.aim_max_model_cells or "the service's",
        "status": job["status"],
        "seconds": round(seconds, 1),
        "worker_cpu_seconds": round(service.worker_cpu_seconds() - cpu_before, 1),
        "worker_peak_mb": service.worker_peak_mb(),
    }
    if job["status"] == "succeeded":
        progress = job.get("progress") or {}
        outcome["rounds"] = progress.get("rounds")
        outcome["error"] = api.model_error(dataset_id, network, workload)
    else:  # failed, or still running at the timeout: how far it got
        outcome["job"] = {k: job.get(k) for k in ("error", "progress")}
    return outcome


def dataset_files(args: argparse.Namespace) -> tuple[Network, Path, np.ndarray]:
    """The network, its CSV and codes (generated once per rows/seed, then reused)."""
    network = make_network(args.attributes, seed=args.seed)
    folder = args.workdir
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"scale-{args.attributes}x{args.rows}-s{args.seed}"
    csv_path, codes_path = stem.with_suffix(".csv"), stem.with_suffix(".npy")
    if not (csv_path.exists() and codes_path.exists()):
        started = time.perf_counter()
        codes = write_csv(network, csv_path, args.rows, seed=args.seed + 1)
        np.save(codes_path, codes)
        print(
            f"generated {csv_path} ({csv_path.stat().st_size / 2**20:.0f} MB) "
            f"in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
    return network, csv_path, np.load(codes_path)


def workload_pairs(network: Network, count: int, seed: int) -> list[tuple[str, ...]]:
    """`count` 2-way marginals of attributes at most 6 apart (where the network has structure)."""
    names = network.names
    near = [(a, b) for i, a in enumerate(names) for b in names[i + 1 : i + 7]]
    return sorted(random.Random(seed).sample(near, min(count, len(near))))


# ---- the report --------------------------------------------------------------------------


def table(report: dict[str, Any]) -> str:
    rows = []
    up, me, an, sy, ai = (
        report.get(k, {}) for k in ("upload", "measure", "answers", "synthetic", "aim")
    )
    if up:
        rows.append(
            (
                "upload",
                f"{up['rows_per_second']:,} rows/s ({up['seconds']} s; "
                f"{up['rows_per_api_cpu_second']:,} rows per API CPU second), "
                f"API peak {up['api_peak_mb']} MB",
                "≥ 200,000 rows/s, API ≤ 1.5 GB",
            )
        )
    if me:
        rows.append(
            (
                "40 one-way + 40 families",
                f"{me['seconds']} s ({me['oneway_seconds']} + {me['families_seconds']}; "
                f"worker CPU {me['worker_cpu_seconds']} s), "
                f"worker peak {me['worker_peak_mb']} MB; "
                f"TV one-way {me['error']['oneway']['mean_tv']}"
                f", families {me['error']['families']['mean_tv']}",
                "≤ 60 s, worker ≤ 1.5 GB",
            )
        )
    if an:
        rows.append(
            (
                "free 3-way answers",
                f"{an['answers_per_second']}/s, p50 {an['p50_ms']} ms, p99 {an['p99_ms']} ms "
                f"({an['clients']} connections, errors {an['errors']}; "
                f"{an['answers_per_api_cpu_second']} per API CPU second)",
                "≥ 500/s, p99 ≤ 100 ms",
            )
        )
    if ai:
        error = ai.get("error", {})
        rows.append(
            (
                f"AIM ρ={ai.get('rho', 0.1)}",
                f"{ai['status']} in {ai['seconds']} s, worker peak {ai['worker_peak_mb']} MB; "
                f"TV {error.get('mean_tv')} (refused {error.get('refused_count')}) vs one-way "
                f"{me.get('error', {}).get('oneway', {}).get('mean_tv') if me else None}",
                "≤ 15 min, worker ≤ 2 GB",
            )
        )
    if sy:
        full, small = sy["full"], sy["small"]
        rows.append(
            (
                "synthetic",
                f"{full['rows']:,} rows in {full['seconds']} s; "
                f"API peak +{full['api_peak_increase_mb']}"
                f" MB (+{small['api_peak_increase_mb']} MB for {small['rows']:,})",
                "≤ 20 s, memory flat in rows",
            )
        )
    width = max(len(r[0]) for r in rows) if rows else 10
    return "\n".join(f"{a:<{width}}  {b}   [target {c}]" for a, b, c in rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--attributes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--port", type=int, default=8531)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/privq-scale"))
    parser.add_argument("--rho", type=float, default=0.1)
    parser.add_argument("--workload", type=int, default=150)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--answer-seconds", type=float, default=15.0)
    parser.add_argument("--synthetic-rows", type=int, default=100_000)
    parser.add_argument("--aim-timeout", type=float, default=1800.0)
    parser.add_argument(
        "--aim-max-model-cells", type=int, default=None, help="AIM's cap (default: the service's)"
    )
    parser.add_argument("--skip", default="", help="comma-separated steps to skip (aim, …)")
    parser.add_argument("--workers", default=None, help="scale-out mode: worker counts, e.g. 1,2,4")
    parser.add_argument("--duration", type=float, default=120.0, help="scale-out: seconds per N")
    parser.add_argument("--inflight", type=int, default=3, help="scale-out: jobs kept per dataset")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--load-generator", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_generator:
        print(json.dumps(asyncio.run(_three_way_load(json.loads(args.load_generator)))))
        return
    if args.workers:
        from scale_workers import run_scale_out

        report = run_scale_out(args, Service, Api, dataset_files)
        print(json.dumps(report))
        return

    skip = set(filter(None, args.skip.split(",")))
    network, csv_path, codes = dataset_files(args)
    schema = network.schema()
    workload = workload_pairs(network, args.workload, args.seed)
    report: dict[str, Any] = {
        "rows": args.rows,
        "attributes": args.attributes,
        "backend": args.backend,
        "load_average_before": round(os.getloadavg()[0], 2),
        "sample_error": {
            "workload_mean_tv": sample_error(codes, network, workload),
            "families_mean_tv": sample_error(codes, network, network.families()),
        },
    }
    del codes
    service = Service(args.backend, args.workdir, args.port, workers=1)
    try:
        service.wait_ready()
        api = Api(service)
        dataset_id, report["upload"] = step_upload(api, csv_path, schema, args.rows)
        print(f"upload: {report['upload']}", file=sys.stderr, flush=True)
        if "measure" in skip:  # and so every step that needs its model
            skip |= {"answers", "synthetic"}
        else:
            report["measure"] = step_measure(api, dataset_id, network, args.rho, workload)
            print(f"measure: {report['measure']}", file=sys.stderr, flush=True)
        if "answers" not in skip:
            report["answers"] = step_answers(api, dataset_id, network.names, args)
            print(f"answers: {report['answers']}", file=sys.stderr, flush=True)
        if "synthetic" not in skip:
            report["synthetic"] = step_synthetic(api, dataset_id, args.synthetic_rows)
            print(f"synthetic: {report['synthetic']}", file=sys.stderr, flush=True)
        if "aim" not in skip:
            report["aim"] = step_aim(api, csv_path, schema, network, workload, args)
            print(f"aim: {report['aim']}", file=sys.stderr, flush=True)
    finally:
        service.stop()
    report["load_average_after"] = round(os.getloadavg()[0], 2)
    print(table(report), file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
