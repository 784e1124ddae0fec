"""Benchmark: a running privq under N concurrent clients — no 5xx, no timeouts, exact ledger.

Against a service that is already running (`--url`, `--admin-key`): sets up tenants, an
Adult dataset (the first `--rows` records), grants, a first measurement (one-way
marginals, so a model exists) and a long AIM job (every 2-way marginal), then runs
`--clients` concurrent clients (default 200) for `--seconds`, each on its own
keep-alive connection, mixing

- reads: the dataset, the budget, a job, the dataset list, the model description;
- free queries: 1–2-way marginals, counts, factored queries;
- measurements: a one-way or small two-way marginal at a small ρ, each with its own
  Idempotency-Key (so the model is refitted all along, beside the AIM job).

A request that takes longer than `--timeout` counts as a timeout; a connection the
server closes or resets counts as dropped. Afterwards every measurement whose answer
was lost (timeout, dropped) is replayed with its Idempotency-Key until answered, and
the dataset's ledger must hold exactly the accepted charges: as many charge lines, and
the same exact sum (decimal strings, no floats).

Prints one JSON line: requests/s, p50/p99 per route and per kind, counts of 5xx,
timeouts and dropped connections, the ledger check, the AIM job's status, the model
versions made during the run, and the load average (the machine may be shared: read
the figures with it).

    .venv/bin/python bench/load.py --url http://127.0.0.1:8400 --admin-key KEY \\
        [--clients 200] [--seconds 30] [--timeout 10] [--rows 10000] [--tenants 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import uuid
from collections import Counter, defaultdict
from decimal import Decimal
from itertools import combinations
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queries import DATA, Connection  # the sibling bench's lean HTTP client

# Attributes small enough that any 2-way marginal over them stays analyst-sized.
SMALL = ["workclass", "marital-status", "relationship", "race", "sex", "income>50K"]
MEASURE_RHO = 1e-4  # per measurement request: σ ≈ 70 on one marginal
MIX = {"read": 0.40, "free": 0.50, "measure": 0.10}


def percentile_ms(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.asarray(values) * 1000, q)), 1) if values else None


def adult_rows(rows: int) -> tuple[bytes, str]:
    lines = (DATA / "adult.csv").read_text().splitlines()[: rows + 1]
    return ("\n".join(lines) + "\n").encode(), (DATA / "adult-domain.json").read_text()


def wait_for_job(client: httpx.Client, job_id: str, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed"):
            return job
        time.sleep(0.5)
    raise RuntimeError(f"job {job_id} did not finish in {timeout} s")


def setup(url: str, admin_key: str, *, rows: int, tenants: int) -> dict[str, Any]:
    """Tenants, dataset, grants, a first model, and a running AIM job."""
    admin = {"Authorization": f"Bearer {admin_key}"}
    tag = uuid.uuid4().hex[:8]
    with httpx.Client(base_url=url, headers=admin, timeout=600) as client:
        csv, schema = adult_rows(rows)
        dataset = client.post(
            "/v1/datasets",
            data={"name": f"load-{tag}", "schema": schema},
            files={"file": ("adult.csv", csv, "text/csv")},
        )
        dataset.raise_for_status()
        dataset_id = dataset.json()["id"]
        keys = []
        for i in range(tenants):
            tenant = client.post("/v1/tenants", json={"name": f"load-{tag}-{i}"})
            tenant.raise_for_status()
            grant = client.post(
                f"/v1/datasets/{dataset_id}/grants",
                json={"tenant_id": tenant.json()["id"], "rho": 100},
            )
            grant.raise_for_status()
            keys.append(tenant.json()["api_key"])
        sizes: dict[str, int] = json.loads(schema)
    accepted: list[str] = []
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {keys[0]}"}, timeout=600
    ) as client:
        first = client.post(
            f"/v1/datasets/{dataset_id}/measurements",
            json={"marginals": [[a] for a in sizes], "rho": 0.5},
        )
        first.raise_for_status()
        accepted.append(first.json()["rho_charged_exact"])
        job = wait_for_job(client, first.json()["job_id"])
        if job["status"] != "succeeded":
            raise RuntimeError(f"the first measurement failed: {job['error']}")
        aim = client.post(f"/v1/datasets/{dataset_id}/mechanisms/aim", json={"rho": 1.0})
        aim.raise_for_status()
        accepted.append(aim.json()["rho_charged_exact"])
    return {
        "dataset_id": dataset_id,
        "keys": keys,
        "sizes": sizes,
        "aim_job_id": aim.json()["job_id"],
        "setup_charges": accepted,
    }


class Plan:
    """A client's random requests: (kind, route template, method, target, body)."""

    def __init__(self, world: dict[str, Any], rng: random.Random, *, owns_aim: bool) -> None:
        self.world, self.rng, self.owns_aim = world, rng, owns_aim
        self.prefix = f"/v1/datasets/{world['dataset_id']}"
        sizes = world["sizes"]
        self.names = list(sizes)
        self.pairs = [list(p) for p in combinations(SMALL, 2)]
        self.sizes = sizes

    def next(self) -> tuple[str, str, str, str, bytes]:
        rng, prefix = self.rng, self.prefix
        kind = rng.choices(list(MIX), weights=list(MIX.values()))[0]
        if kind == "read":
            choice = rng.randrange(5)
            if choice == 0:
                return kind, "GET /v1/datasets/{id}", "GET", prefix, b""
            if choice == 1:
                return kind, "GET /budget", "GET", prefix + "/budget", b""
            if choice == 2 and self.owns_aim:  # a tenant sees its own jobs only
                target = f"/v1/jobs/{self.world['aim_job_id']}"
                return kind, "GET /v1/jobs/{id}", "GET", target, b""
            if choice in (2, 3):
                return kind, "GET /v1/datasets", "GET", "/v1/datasets", b""
            return kind, "GET /model", "GET", prefix + "/model", b""
        if kind == "free":
            choice = rng.randrange(3)
            if choice == 0:
                attrs = rng.choice([[a] for a in self.names] + self.pairs)
                query = urlencode({"attrs": ",".join(attrs)})
                return kind, "GET /marginals", "GET", f"{prefix}/marginals?{query}", b""
            if choice == 1:
                attribute = rng.choice(SMALL)
                code = rng.randrange(self.sizes[attribute])
                query = urlencode({"where": f"{attribute}:{code}"})
                return kind, "GET /count", "GET", f"{prefix}/count?{query}", b""
            by, where = rng.sample(SMALL, 2)
            body = {
                "queries": [
                    {"where": {where: [rng.randrange(self.sizes[where])]}, "by": {by: "value"}}
                ]
            }
            return kind, "POST /queries", "POST", prefix + "/queries", json.dumps(body).encode()
        marginal = rng.choice([[a] for a in SMALL] + self.pairs)
        body = {"marginals": [marginal], "rho": MEASURE_RHO}
        return (
            kind,
            "POST /measurements",
            "POST",
            prefix + "/measurements",
            json.dumps(body).encode(),
        )


async def run_clients(args: argparse.Namespace, world: dict[str, Any]) -> dict[str, Any]:
    urls = [httpx.URL(u) for u in args.url]
    deadline = time.perf_counter() + args.seconds
    latencies: dict[str, list[float]] = defaultdict(list)
    kinds: dict[str, list[float]] = defaultdict(list)
    statuses: Counter[str] = Counter()
    server_errors: Counter[str] = Counter()
    timeouts: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    accepted: list[str] = []
    # (url, target, body, key, api key) of measurements whose answer was lost
    lost: list[tuple[str, str, bytes, str, str]] = []

    async def client(index: int) -> None:
        rng = random.Random(args.seed * 100_000 + index)
        tenant = index % len(world["keys"])
        plan = Plan(world, rng, owns_aim=tenant == 0)
        api_key = world["keys"][tenant]
        url = urls[index % len(urls)]
        connection = Connection(url.host, url.port or 80, f"Bearer {api_key}")
        while time.perf_counter() < deadline:
            kind, route, method, target, body = plan.next()
            key = uuid.uuid4().hex if kind == "measure" else ""
            extra = f"Idempotency-Key: {key}\r\n" if key else ""
            started = time.perf_counter()
            try:
                status, answer = await asyncio.wait_for(
                    connection.request(method, target, body, extra), args.timeout
                )
            except TimeoutError:
                timeouts[route] += 1
                await connection.close()
                if key:
                    lost.append((str(url), target, body, key, api_key))
                status = None
            except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError):
                dropped[route] += 1
                await connection.close()
                if key:
                    lost.append((str(url), target, body, key, api_key))
                status = None
            if status is None:
                continue
            elapsed = time.perf_counter() - started
            latencies[route].append(elapsed)
            kinds[kind].append(elapsed)
            statuses[str(status)] += 1
            if status >= 500:
                server_errors[route] += 1
            if key and status == 202:
                accepted.append(json.loads(answer)["rho_charged_exact"])
        await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(args.clients)))
    elapsed = time.perf_counter() - started
    total = sum(len(v) for v in latencies.values())
    return {
        "elapsed": elapsed,
        "total": total,
        "latencies": latencies,
        "kinds": kinds,
        "statuses": statuses,
        "server_errors": server_errors,
        "timeouts": timeouts,
        "dropped": dropped,
        "accepted": accepted,
        "lost": lost,
    }


def settle_lost(lost: list[tuple[str, str, bytes, str, str]]) -> list[str]:
    """Replay every measurement whose answer was lost, with its key, until answered."""
    settled = []
    for url, target, body, key, api_key in lost:
        headers = {
            "Authorization": f"Bearer {api_key}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        }
        for _attempt in range(20):
            try:
                response = httpx.post(
                    url.rstrip("/") + target, content=body, headers=headers, timeout=60
                )
            except httpx.HTTPError:
                time.sleep(1)
                continue
            if response.status_code == 202:
                settled.append(response.json()["rho_charged_exact"])
            if response.status_code < 500:
                break
            time.sleep(1)
    return settled


def check_ledger(args: argparse.Namespace, world: dict[str, Any], charges: list[str]) -> dict:
    admin = {"Authorization": f"Bearer {args.admin_key}"}
    ledger: list[dict[str, Any]] = []
    target: str | None = f"/v1/datasets/{world['dataset_id']}/ledger?limit=1000"
    while target is not None:  # every page, following Link: <…>; rel="next"
        page = httpx.get(args.url[0] + target, headers=admin, timeout=120)
        page.raise_for_status()
        ledger.extend(page.json())
        target = page.links.get("next", {}).get("url")
    lines = [Decimal(e["rho_exact"]) for e in ledger if e["kind"] == "charge"]
    refunds = [Decimal(e["rho_exact"]) for e in ledger if e["kind"] == "refund"]
    expected = sum((Decimal(c) for c in charges), Decimal(0))
    found = sum(lines, Decimal(0))
    return {
        "accepted_charges": len(charges),
        "ledger_charge_lines": len(lines),
        "accepted_rho": str(expected),
        "ledger_charged_rho": str(found),
        "ledger_refunded_rho": str(-sum(refunds, Decimal(0))),
        "exact_match": len(lines) == len(charges) and found == expected,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        action="append",
        required=True,
        help="an API process; repeat for several (clients are spread over them)",
    )
    parser.add_argument("--admin-key", required=True)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--timeout", type=float, default=10, help="seconds before a timeout")
    parser.add_argument("--rows", type=int, default=10_000, help="Adult records to upload")
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--label", default="", help="free text copied into the output")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    world = setup(args.url[0], args.admin_key, rows=args.rows, tenants=args.tenants)
    with httpx.Client(base_url=args.url[0], timeout=60) as probe:
        versions_before = probe.get(
            f"/v1/datasets/{world['dataset_id']}/model",
            headers={"Authorization": f"Bearer {world['keys'][0]}"},
        ).json()["version"]
    result = asyncio.run(run_clients(args, world))
    settled = settle_lost(result["lost"])
    ledger = check_ledger(args, world, world["setup_charges"] + result["accepted"] + settled)
    with httpx.Client(
        base_url=args.url[0], headers={"Authorization": f"Bearer {world['keys'][0]}"}, timeout=60
    ) as client:
        aim = client.get(f"/v1/jobs/{world['aim_job_id']}").json()
        version = client.get(f"/v1/datasets/{world['dataset_id']}/model").json()["version"]

    by_route = {
        route: {
            "n": len(values),
            "p50_ms": percentile_ms(values, 50),
            "p99_ms": percentile_ms(values, 99),
            "5xx": result["server_errors"][route],
            "timeouts": result["timeouts"][route],
            "dropped": result["dropped"][route],
        }
        for route, values in sorted(result["latencies"].items())
    }
    by_kind = {
        kind: {
            "n": len(values),
            "p50_ms": percentile_ms(values, 50),
            "p99_ms": percentile_ms(values, 99),
        }
        for kind, values in sorted(result["kinds"].items())
    }
    print(
        json.dumps(
            {
                "label": args.label,
                "clients": args.clients,
                "api_processes": len(args.url),
                "seconds": round(result["elapsed"], 1),
                "requests": result["total"],
                "requests_per_second": round(result["total"] / result["elapsed"], 1),
                "5xx": sum(result["server_errors"].values()),
                "timeouts": sum(result["timeouts"].values()),
                "dropped": sum(result["dropped"].values()),
                "statuses": dict(sorted(result["statuses"].items())),
                "by_kind": by_kind,
                "by_route": by_route,
                "measurements_accepted": len(result["accepted"]) + len(settled),
                "answers_lost_then_settled": len(result["lost"]),
                "ledger": ledger,
                "aim_job": {
                    "status": aim["status"],
                    "stage": (aim.get("progress") or {}).get("stage"),
                },
                "model_versions_during_run": version - versions_before,
                "load_average_before": round(load_before, 2),
                "load_average_after": round(os.getloadavg()[0], 2),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
