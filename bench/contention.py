"""Admins and tenants writing at once beside busy workers: does any request fail?

Starts `privq serve` and `--workers` `privq worker` processes on a scratch PostgreSQL
database (`--backend sqlite`: a scratch SQLite file and the embedded worker;
`bench/scale_service.py`). Three small datasets, each granted to `--tenants`
tenants. For `--duration` seconds every tenant, in a thread of its own, submits
measurements and AIM jobs, cancels some of its running jobs and asks for marginals,
while two admin threads revoke grants and grant them again, change grant limits and
estimators, and try to purge and delete the datasets (refused while their jobs run).
Prints one JSON line: the answers per call and status, the 5xx answers (a deadlock
surfaces as 503 `database_unavailable`), and from the service's own log the jobs the
workers gave back after a database error and the deadlocks among those errors.

    .venv/bin/python bench/contention.py [--backend postgres|sqlite] [--duration 60]
        [--workers 2] [--tenants 4]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from scale_service import Service

SCHEMA = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
    ]
}
CSV = "sex,age\n" + "".join(f"{'FM'[i % 2]},{17 + (i * 7) % 90}\n" for i in range(200))


class Calls:
    """Every answer's status per call, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def note(self, call: str, response: httpx.Response) -> httpx.Response:
        with self.lock:
            self.counts[f"{call} {response.status_code}"] += 1
        return response


def tenant_loop(client: httpx.Client, datasets: list[str], calls: Calls, stop: Any) -> None:
    rng = random.Random()
    while not stop.is_set():
        dataset, action = rng.choice(datasets), rng.random()
        if action < 0.4:
            body = {"marginals": [["sex"], ["age"]], "rho": 0.01}
            calls.note("measure", client.post(f"/v1/datasets/{dataset}/measurements", json=body))
        elif action < 0.6:
            calls.note(
                "aim", client.post(f"/v1/datasets/{dataset}/mechanisms/aim", json={"rho": 0.05})
            )
        elif action < 0.8:
            running = calls.note("jobs", client.get("/v1/jobs", params={"status": "running"}))
            for job in running.json() if running.status_code == 200 else []:
                if rng.random() < 0.3:
                    calls.note("cancel", client.post(f"/v1/jobs/{job['id']}/cancel"))
        else:
            answer = client.get(f"/v1/datasets/{dataset}/marginals", params={"attrs": "sex"})
            calls.note("marginals", answer)


def admin_loop(
    admin: httpx.Client, datasets: list[str], tenants: list[str], calls: Calls, stop: Any
) -> None:
    rng = random.Random()
    while not stop.is_set():
        dataset, action = rng.choice(datasets), rng.random()
        listed = calls.note("grants", admin.get(f"/v1/datasets/{dataset}/grants"))
        live = (
            [g for g in listed.json() if g.get("revoked_at") is None] if listed.is_success else []
        )
        grants = f"/v1/datasets/{dataset}/grants"
        if action < 0.3 and live:
            grant = rng.choice(live)
            calls.note("revoke", admin.delete(f"{grants}/{grant['id']}"))
            again = {"tenant_id": grant["tenant_id"], "rho": 50}
            calls.note("grant", admin.post(grants, json=again))
        elif action < 0.5 and live:
            limit = {"rho": 60 + rng.random()}
            calls.note("limit", admin.patch(f"{grants}/{rng.choice(live)['id']}", json=limit))
        elif action < 0.6:
            estimator = {"estimator": rng.choice(["mle", "cgm-em"])}
            calls.note("estimator", admin.patch(f"/v1/datasets/{dataset}", json=estimator))
        elif action < 0.75:
            calls.note("delete", admin.delete(f"/v1/datasets/{dataset}"))
        elif action < 0.85:
            calls.note("purge", admin.delete(f"/v1/datasets/{dataset}/records"))
        else:
            tenant = {"disabled": False}
            calls.note("tenant", admin.patch(f"/v1/tenants/{rng.choice(tenants)}", json=tenant))
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--port", type=int, default=8474)
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="privq-contention-"))
    service = Service(args.backend, workdir, args.port, args.workers)
    stop = threading.Event()
    try:
        service.wait_ready()
        headers = {"Authorization": f"Bearer {service.admin_key}"}
        admin = httpx.Client(base_url=service.url, headers=headers, timeout=120.0)
        datasets = []
        for k in range(3):
            upload = admin.post(
                "/v1/datasets",
                data={"name": f"contention-{k}", "schema": json.dumps(SCHEMA)},
                files={"file": ("data.csv", CSV.encode(), "text/csv")},
            )
            upload.raise_for_status()
            datasets.append(upload.json()["id"])
        tenants, clients = [], []
        for k in range(args.tenants):
            tenant = admin.post("/v1/tenants", json={"name": f"contention-{k}"})
            tenant.raise_for_status()
            tenants.append(tenant.json()["id"])
            key = {"Authorization": f"Bearer {tenant.json()['api_key']}"}
            clients.append(httpx.Client(base_url=service.url, headers=key, timeout=120.0))
            for dataset in datasets:
                grant = {"tenant_id": tenants[-1], "rho": 50}
                admin.post(f"/v1/datasets/{dataset}/grants", json=grant).raise_for_status()
        calls = Calls()
        threads = [
            threading.Thread(target=tenant_loop, args=(client, datasets, calls, stop))
            for client in clients
        ]
        threads += [
            threading.Thread(
                target=admin_loop,
                args=(
                    httpx.Client(base_url=service.url, headers=headers, timeout=120.0),
                    datasets,
                    tenants,
                    calls,
                    stop,
                ),
            )
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        time.sleep(args.duration)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        stop.set()
        service.stop()
    log = (workdir / f"service-{args.backend}.log").read_text(errors="replace")
    server_errors = {k: v for k, v in calls.counts.items() if k.split()[-1].startswith("5")}
    print(
        json.dumps(
            {
                "bench": "contention",
                "duration_s": args.duration,
                "workers": args.workers,
                "tenants": args.tenants,
                "calls": dict(sorted(calls.counts.items())),
                "server_errors": server_errors,
                "deadlocks_in_worker_log": log.count("DeadlockDetected"),
                "jobs_given_back_after_database_error": log.count(
                    "database error; giving the job back"
                ),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
