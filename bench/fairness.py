"""How long does tenant B's short job wait behind tenant A's long AIM? Before and after the
fair queue, on SQLite and PostgreSQL.

For each backend (a scratch SQLite file; a scratch PostgreSQL database) and each of
three set-ups, a fresh database, `privq serve --workers-in-process 0` and `privq worker`
processes:

- `fcfs_one_slot` — before: one job slot, first come first served
  (`PRIVQ_FAIR_QUEUE=false`: no yielding), what the embedded default was;
- `fair_one_slot` — one slot, the fair queue: A's AIM yields between rounds;
- `fair_two_slots` — the embedded default now: two slots, the fair queue.

Tenant A starts an AIM job (ρ = `--rho`, every pair of a generated table's attributes)
on its table; once A's run has stored its first selection round, tenant B measures one
one-way marginal of a small table of its own. Reported per set-up: B's wait (submitted
→ claimed) and turnaround (submitted → done), A's run time (submitted → done), how many
times A gave its slot back (the workers' log), and both jobs' status. One JSON line
with the figures, the command and the build (git commit).

    .venv/bin/python bench/fairness.py [--backends sqlite,postgres] [--rows 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432"
SCRATCH_DATABASE = "privq_fairness"
SETUPS = {"fcfs_one_slot": (1, False), "fair_one_slot": (1, True), "fair_two_slots": (2, True)}
# A's table: correlated attributes of these sizes (AIM's run time grows with them).
SIZES = (8, 6, 5, 7, 4, 6)


def write_table(path: Path, sizes: tuple[int, ...], rows: int, seed: int) -> dict[str, Any]:
    """A CSV of `rows` rows over attributes a0, a1, … (each a noisy copy of the one before,
    so AIM finds pairs worth measuring), and its schema."""
    rng = np.random.default_rng(seed)
    columns = [rng.integers(0, sizes[0], rows)]
    for size in sizes[1:]:
        previous = columns[-1]
        copy = rng.random(rows) < 0.6
        columns.append(np.where(copy, previous % size, rng.integers(0, size, rows)))
    names = [f"a{i}" for i in range(len(sizes))]
    lines = [",".join(names)]
    lines += [",".join(map(str, row)) for row in np.stack(columns, axis=1).tolist()]
    path.write_text("\n".join(lines) + "\n")
    return {
        "attributes": [
            {"name": name, "type": "integer", "size": size}
            for name, size in zip(names, sizes, strict=True)
        ]
    }


class Stack:
    """A fresh database, the API and `slots` workers, as processes on loopback."""

    def __init__(self, backend: str, workdir: Path, port: int, slots: int, fair: bool) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.admin_key = secrets.token_urlsafe(32)
        if backend == "sqlite":
            database = workdir / "fairness.db"
            database.unlink(missing_ok=True)
            database_url = f"sqlite:///{database}"
        else:
            for command in ("dropdb", "createdb"):
                extra = ["--if-exists"] if command == "dropdb" else []
                subprocess.run(
                    [command, "-h", "127.0.0.1", "-U", "postgres", *extra, SCRATCH_DATABASE],
                    check=True,
                )
            database_url = f"{POSTGRES_ADMIN_URL}/{SCRATCH_DATABASE}"
        self.env = {
            **os.environ,
            "PRIVQ_DATABASE_URL": database_url,
            "PRIVQ_ADMIN_KEY": self.admin_key,
            "PRIVQ_LOG_LEVEL": "INFO",
            "PRIVQ_FAIR_QUEUE": "true" if fair else "false",
        }
        self.worker_log = workdir / f"workers-{backend}-{slots}-{fair}.log"
        self.log = open(workdir / f"api-{backend}.log", "ab")  # noqa: SIM115 — closed in stop()
        privq = [sys.executable, "-m", "app.cli"]
        subprocess.run([*privq, "migrate"], env=self.env, check=True, cwd=ROOT)
        serve = [*privq, "serve", "--host", "127.0.0.1", "--port", str(port)]
        self.api = self._start([*serve, "--workers-in-process", "0"], self.log)
        self.worker_out = open(self.worker_log, "ab")  # noqa: SIM115 — closed in stop()
        self.workers = [self._start([*privq, "worker"], self.worker_out) for _ in range(slots)]

    def _start(self, command: list[str], log: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=self.env, cwd=ROOT, stdout=log, stderr=log)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError("the API did not become healthy")

    def yields(self) -> int:
        self.worker_out.flush()
        return self.worker_log.read_text(errors="replace").count("job yields its slot")

    def stop(self) -> None:
        for process in [*self.workers, self.api]:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.log.close()
        self.worker_out.close()


def tenant_on(
    admin: httpx.Client, url: str, name: str, csv: Path, schema: dict[str, Any]
) -> tuple[httpx.Client, str]:
    """A tenant with ρ 10 on a new dataset uploaded from `csv`: its client, the dataset."""
    with open(csv, "rb") as handle:
        uploaded = admin.post(
            "/v1/datasets",
            data={"name": name, "schema": json.dumps(schema)},
            files={"file": (csv.name, handle, "text/csv")},
        )
    uploaded.raise_for_status()
    dataset = uploaded.json()["id"]
    tenant = admin.post("/v1/tenants", json={"name": name})
    tenant.raise_for_status()
    admin.post(
        f"/v1/datasets/{dataset}/grants", json={"tenant_id": tenant.json()["id"], "rho": 10}
    ).raise_for_status()
    client = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {tenant.json()['api_key']}"}, timeout=600
    )
    return client, dataset


def wait_for(client: httpx.Client, job_id: str, until: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if until(job) or job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    raise RuntimeError(f"job {job_id} did not get there within {timeout} s")


def seconds_between(start: str, end: str | None) -> float | None:
    if end is None:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 1)


def run_setup(
    backend: str, setup: str, workdir: Path, args: argparse.Namespace, tables: dict[str, Any]
) -> dict[str, Any]:
    slots, fair = SETUPS[setup]
    stack = Stack(backend, workdir, args.port, slots, fair)
    try:
        stack.wait_ready()
        admin = httpx.Client(
            base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin_key}"}, timeout=600
        )
        a, a_data = tenant_on(admin, stack.url, "a", *tables["a"])
        b, b_data = tenant_on(admin, stack.url, "b", *tables["b"])
        submitted = a.post(f"/v1/datasets/{a_data}/mechanisms/aim", json={"rho": args.rho})
        submitted.raise_for_status()
        a_job = submitted.json()["job_id"]
        # B arrives once A is into its selection rounds (the one-way rounds are quick).
        wait_for(
            a,
            a_job,
            lambda job: (job.get("progress") or {}).get("rounds_done", 0) > len(SIZES),
            args.timeout,
        )
        measured = b.post(
            f"/v1/datasets/{b_data}/measurements", json={"marginals": [["a0"]], "rho": 0.01}
        )
        measured.raise_for_status()
        b_job = measured.json()["job_id"]
        b_done = wait_for(b, b_job, lambda job: False, args.timeout)
        a_done = wait_for(a, a_job, lambda job: False, args.timeout)
        return {
            "b_wait_seconds": seconds_between(b_done["created_at"], b_done["started_at"]),
            "b_turnaround_seconds": seconds_between(b_done["created_at"], b_done["finished_at"]),
            "a_run_seconds": seconds_between(a_done["created_at"], a_done["finished_at"]),
            "a_rounds": (a_done.get("progress") or {}).get("rounds"),
            "a_yields": stack.yields(),
            "status": {"a": a_done["status"], "b": b_done["status"]},
        }
    finally:
        stack.stop()


def build() -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True).stdout
    return commit + ("-dirty" if dirty.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--rows", type=int, default=20_000, help="rows of A's table")
    parser.add_argument("--rho", type=float, default=0.5, help="A's AIM budget")
    parser.add_argument("--port", type=int, default=8479)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="privq-fairness-"))
    tables = {
        "a": (workdir / "a.csv", write_table(workdir / "a.csv", SIZES, args.rows, 1)),
        "b": (workdir / "b.csv", write_table(workdir / "b.csv", (4, 3), 2000, 2)),
    }
    results: dict[str, dict[str, Any]] = {}
    for backend in args.backends.split(","):
        for setup in args.setups.split(","):
            outcome = run_setup(backend, setup, workdir, args, tables)
            results.setdefault(backend, {})[setup] = outcome
            print(f"[{backend} {setup}] {json.dumps(outcome)}", file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "bench": "fairness",
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "build": build(),
                "a_table": {"rows": args.rows, "sizes": list(SIZES), "aim_rho": args.rho},
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
