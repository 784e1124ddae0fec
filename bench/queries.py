"""Benchmark: free queries over HTTP — throughput and latency, idle and while a fit runs.

Serves the Adult model fitted from the engine benchmark's 24 fixed measurements
(../shared/data/adult-measurements-sigma10.npz, σ = 10) with `privq serve` (uvicorn, a
temporary SQLite file, loopback only), then runs a load generator in a separate
process: `--clients` concurrent clients (asyncio, a minimal keep-alive HTTP/1.1
client, so the generator's own CPU stays small) asking random 1- to 3-way
marginals (of at most `--max-cells` cells, so that responses stay analyst-sized),
counts (`GET /count`) and factored queries (`POST /queries`) for `--duration` seconds.

Phase 1: the embedded worker is idle. Phase 2: the same load while the server's
embedded worker measures and fits one new 2-way marginal after another (a job is
kept queued all the time), so the API serves while a fit runs beside it.

Setup goes through the API where the API has a way (tenant, upload, grant); the 24
fixed measurements are written through the services (a bench-only path, not an API):
one job, its ledger charge of 24 × 1/(2·10²) = 0.12 ρ, the measurement rows (values
rounded to integers, as stored releases are), then `fit` and `save_version`.

Prints one JSON line. Floors (2 cores): ≥ 300 requests/s and p99 ≤ 100 ms idle;
p99 ≤ 250 ms while fitting. Each phase also reports the server's CPU milliseconds per
request and the load average before it: on a machine shared with other work, those
tell what the server costs from what it was given.

The marginal cap matters: over all 469 of Adult's 1- to 3-way marginals the mean
answer has ~45,000 cells (~1 MB of JSON with labels); at most 1,000 cells keeps 155
of them (mean ~320 cells), the size of what an analyst reads.

    .venv/bin/python bench/queries.py [--duration 20] [--clients 16] [--max-cells 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np

DATA = Path(
    os.environ.get("PRIVQ_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
MAX_DURATION_SECONDS = 300
MEASUREMENT_SIGMA = 10.0
# 2-way marginals the background phase buys one after another (small attributes, so
# the model stays within the cell cap however many of them are added).
BACKGROUND_PAIRS = [
    ("workclass", "sex"),
    ("race", "income>50K"),
    ("marital-status", "sex"),
    ("relationship", "income>50K"),
    ("workclass", "race"),
    ("education-num", "sex"),
    ("marital-status", "income>50K"),
    ("occupation", "race"),
    ("relationship", "race"),
    ("workclass", "income>50K"),
    ("education-num", "race"),
    ("occupation", "sex"),
]
FLOORS = {"requests_per_second": 300.0, "p99_ms": 100.0, "p99_ms_while_fitting": 250.0}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values), q))


# ---- the load generator (runs in its own process) -----------------------------------


def request_plan(sizes: dict[str, int], max_cells: int, rng: random.Random) -> Iterator[tuple]:
    """An endless stream of (method, path suffix, params or body) requests."""
    names = list(sizes)
    marginals = [
        subset
        for k in (1, 2, 3)
        for subset in combinations(names, k)
        if math.prod(sizes[a] for a in subset) <= max_cells
    ]
    small = [a for a in names if sizes[a] <= 16]

    def some_codes(attribute: str) -> list[int]:
        size = sizes[attribute]
        return sorted(rng.sample(range(size), rng.randint(1, min(size, 4))))

    while True:
        kind = rng.random()
        if kind < 0.5:
            subset = list(rng.choice(marginals))
            rng.shuffle(subset)
            yield ("GET", "/marginals", {"attrs": ",".join(subset)})
        elif kind < 0.75:
            filters = rng.sample(names, rng.randint(1, 3))
            where = []
            for attribute in filters:
                if sizes[attribute] > 16 and rng.random() < 0.5:
                    low = rng.randrange(sizes[attribute] - 1)
                    high = rng.randint(low + 1, sizes[attribute])
                    where.append(f"{attribute}:{low}..{high}")
                else:
                    where.append(f"{attribute}:{','.join(map(str, some_codes(attribute)))}")
            yield ("GET", "/count", {"where": where})
        else:
            by = rng.choice(small)
            filters = rng.sample([a for a in names if a != by], rng.randint(1, 2))
            query = {"where": {a: some_codes(a) for a in filters}, "by": {by: "value"}}
            yield ("POST", "/queries", {"queries": [query]})


class Connection:
    """A minimal HTTP/1.1 keep-alive client on one socket: cheap enough that the load
    generator, not the server, is never what limits the measured rate."""

    def __init__(self, host: str, port: int, authorization: str) -> None:
        self.host, self.port = host, port
        self.fixed_headers = (
            f"Host: {host}:{port}\r\nAuthorization: {authorization}\r\nAccept: application/json\r\n"
        )
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, target: str, body: bytes = b"", extra_headers: str = ""
    ) -> tuple[int, bytes]:
        """One request; `extra_headers` are "Name: value\r\n" lines for this one only."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            sock = self.writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert self.reader is not None
        head = f"{method} {target} HTTP/1.1\r\n{self.fixed_headers}{extra_headers}"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length: int | None = None
        chunked = False
        closing = False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
            elif name == "connection" and "close" in value.lower():
                closing = True
        if chunked:
            parts = []
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                parts.append(await self.reader.readexactly(size + 2))
                if size == 0:
                    break
            payload = b"".join(p[:-2] for p in parts)
        else:
            payload = await self.reader.readexactly(length or 0)
        if closing:
            await self.close()
        return status, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def run_load(config: dict[str, Any]) -> dict[str, Any]:
    url = httpx.URL(config["url"])
    prefix = f"/v1/datasets/{config['dataset_id']}"
    authorization = f"Bearer {config['api_key']}"
    deadline = time.perf_counter() + config["duration"]
    latencies: list[float] = []
    errors: dict[str, int] = {}

    async def client_loop(seed: int) -> None:
        plan = request_plan(config["sizes"], config["max_cells"], random.Random(seed))
        connection = Connection(url.host, url.port or 80, authorization)
        while time.perf_counter() < deadline:
            method, path, payload = next(plan)
            if method == "GET":
                target, body = prefix + path + "?" + urlencode(payload, doseq=True), b""
            else:
                target, body = prefix + path, json.dumps(payload).encode()
            started = time.perf_counter()
            try:
                status, answer = await connection.request(method, target, body)
                if status == 200 and not answer.startswith(b"{"):
                    status = -1  # not the JSON document expected
                outcome = str(status)
            except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as error:
                outcome = type(error).__name__
                await connection.close()
            latencies.append(time.perf_counter() - started)
            if outcome != "200":
                errors[outcome] = errors.get(outcome, 0) + 1
        await connection.close()

    started = time.perf_counter()
    await asyncio.gather(
        *(client_loop(config["seed"] * 1000 + i) for i in range(config["clients"]))
    )
    elapsed = time.perf_counter() - started
    latencies_ms = [1000 * x for x in latencies]
    return {
        "requests": len(latencies),
        "seconds": round(elapsed, 2),
        "requests_per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies_ms, 50), 2),
        "p99_ms": round(percentile(latencies_ms, 99), 2),
        "max_ms": round(max(latencies_ms, default=float("nan")), 2),
        "errors": sum(errors.values()),
        "error_statuses": errors,
    }


def load_generator_main(config_json: str) -> None:
    print(json.dumps(asyncio.run(run_load(json.loads(config_json)))), flush=True)


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of one process (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_load_process(config: dict[str, Any], server_pid: int | None = None) -> dict[str, Any]:
    """The load generator in a separate process, so it does not share the bench's GIL.

    With `server_pid`, also reports the server's CPU per request and the machine's load
    average before the phase: on a shared machine these tell contention from cost.
    """
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cpu_before = process_cpu_seconds(server_pid) if server_pid else None
    result = subprocess.run(
        [sys.executable, __file__, "--load-generator", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=config["duration"] + 120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"load generator failed: {result.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    cpu_after = process_cpu_seconds(server_pid) if server_pid else None
    if cpu_before is not None and cpu_after is not None and report["requests"]:
        report["server_cpu_ms_per_request"] = round(
            1000 * (cpu_after - cpu_before) / report["requests"], 2
        )
    if load_before is not None:
        report["load_average_before"] = round(load_before, 2)
    return report


# ---- the server and its data ---------------------------------------------------------


class Server:
    """`privq serve` on loopback with a temporary SQLite file; stopped by its own pid."""

    def __init__(self, workdir: Path, *, embedded_worker: bool) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_key = secrets.token_urlsafe(32)
        self.database_url = f"sqlite:///{workdir / 'privq-bench.db'}"
        env = {
            **os.environ,
            "PRIVQ_DATABASE_URL": self.database_url,
            "PRIVQ_ADMIN_KEY": self.admin_key,
            "PRIVQ_LOG_LEVEL": os.environ.get("PRIVQ_LOG_LEVEL", "WARNING"),
        }
        command = [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        if not embedded_worker:
            command += ["--workers-in-process", "0"]
        self.log = open(workdir / "server.log", "wb")  # noqa: SIM115 — closed in stop()
        self.process = subprocess.Popen(
            command, env=env, cwd=workdir, stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError("server did not become healthy")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def setup_over_api(server: Server, grant_rho: float) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {server.admin_key}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=300.0) as client:
        tenant = client.post("/v1/tenants", json={"name": "bench"})
        tenant.raise_for_status()
        with open(DATA / "adult.csv", "rb") as csv_file:
            dataset = client.post(
                "/v1/datasets",
                data={"name": "adult", "schema": (DATA / "adult-domain.json").read_text()},
                files={"file": ("adult.csv", csv_file, "text/csv")},
            )
        dataset.raise_for_status()
        grant = client.post(
            f"/v1/datasets/{dataset.json()['id']}/grants",
            json={"tenant_id": tenant.json()["id"], "rho": grant_rho},
        )
        grant.raise_for_status()
    return {
        "tenant_id": tenant.json()["id"],
        "api_key": tenant.json()["api_key"],
        "dataset_id": dataset.json()["id"],
    }


def seed_fixed_measurements(database_url: str, tenant_id: str, dataset_id: str) -> dict[str, Any]:
    """Bench-only: the 24 fixed σ=10 measurements as one paid job, fitted and saved."""
    from app.db import Database, Job
    from app.pgm.estimation import fit
    from app.pgm.measurement import Measurement
    from app.services import datasets as dataset_service
    from app.services import jobs, ledger
    from app.services import measurements as measurement_service
    from app.services import models as model_service
    from app.services.rho import rho_units

    with np.load(DATA / "adult-measurements-sigma10.npz", allow_pickle=False) as archive:
        sigma = float(archive["sigma"])
        stored = {
            key: np.rint(archive[key]).astype(np.int64) for key in archive.files if key != "sigma"
        }
    assert sigma == MEASUREMENT_SIGMA
    per_measurement = rho_units("0.005")  # 1/(2σ²) at σ = 10
    database = Database(database_url)
    try:
        with database.unit_of_work() as session:
            domain = dataset_service.dataset_schema(
                dataset_service.get_dataset(session, dataset_id)
            ).domain()
            job = jobs.create(
                session,
                job_id=str(uuid.uuid4()),
                dataset_id=dataset_id,
                tenant_id=tenant_id,
                kind="measure",
                params={
                    "marginals": [k.split("|") for k in stored],
                    "noise": "gaussian",
                    "sigma": sigma,
                    "source": "bench/queries.py fixed measurements",
                },
            )
            ledger.charge(
                session,
                tenant_id=tenant_id,
                dataset_id=dataset_id,
                rho_units=per_measurement * len(stored),
                job_id=job.id,
                description=f"bench: {len(stored)} fixed Gaussian measurements, sigma=10",
            )
            high_water = 0
            measurements = []
            for position, (key, values) in enumerate(stored.items()):
                attributes = tuple(key.split("|"))
                record = measurement_service.store(
                    session,
                    dataset_id=dataset_id,
                    job_id=job.id,
                    position=position,
                    attributes=attributes,
                    noise_kind="gaussian",
                    scale=sigma,
                    rho_units_used=per_measurement,
                    values=values,
                    access_id=None,  # bench-only: no gate read, the values are fixed
                )
                high_water = max(high_water, record.id)
                measurements.append(Measurement(attributes, values, "gaussian", sigma))
            # Never claimable: this job's work is done here.
            job.status = "succeeded"
            job.progress = {"stage": "done"}
        started = time.perf_counter()
        model, record = fit(domain, measurements)
        fit_seconds = time.perf_counter() - started
        with database.unit_of_work() as session:
            saved = model_service.save_version(
                session,
                dataset_id=dataset_id,
                model=model,
                record=record,
                high_water=high_water,
                measurement_count=len(measurements),
            )
            session.get(Job, job.id).model_version = saved.version  # type: ignore[union-attr]
    finally:
        database.dispose()
    return {
        "measurements": len(measurements),
        "fit_seconds": round(fit_seconds, 2),
        "iterations": record.iterations,
        "sizes": dict(zip(domain.attributes, domain.sizes, strict=True)),
    }


class BackgroundFits:
    """Keeps the embedded worker busy: a new 2-way measurement queued after another."""

    def __init__(self, server: Server, api_key: str, dataset_id: str) -> None:
        self.server = server
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.dataset_id = dataset_id
        self.stop_event = threading.Event()
        self.fitting_seen = threading.Event()
        self.fits_completed = 0
        self.failures: list[str] = []
        self.versions: list[int] = []
        self.post_ms: list[float] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        pairs = iter(BACKGROUND_PAIRS * 10)
        pending: list[str] = []
        with httpx.Client(base_url=self.server.url, headers=self.headers, timeout=60) as client:
            while not self.stop_event.is_set():
                while len(pending) < 2:
                    pair = next(pairs)
                    posted = time.perf_counter()
                    response = client.post(
                        f"/v1/datasets/{self.dataset_id}/measurements",
                        json={
                            "marginals": [list(pair)],
                            "noise": "gaussian",
                            "sigma": MEASUREMENT_SIGMA,
                        },
                    )
                    if response.status_code != 202:
                        self.failures.append(f"{response.status_code} {response.text[:200]}")
                        self.stop_event.set()
                        return
                    self.post_ms.append(1000 * (time.perf_counter() - posted))
                    pending.append(response.json()["job_id"])
                for job_id in list(pending):
                    job = client.get(f"/v1/jobs/{job_id}").json()
                    if (job.get("progress") or {}).get("stage") == "fitting":
                        self.fitting_seen.set()
                    if job["status"] in ("succeeded", "failed"):
                        pending.remove(job_id)
                        if job["status"] == "succeeded":
                            self.fits_completed += 1
                            self.versions.append(job["model_version"])
                            self.fitting_seen.set()
                        else:
                            self.failures.append(str(job.get("error"))[:200])
                self.stop_event.wait(0.2)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=120)


def fit_loop_main(duration: float) -> None:
    """Emulated background load: cold Adult fits, one after another, for `duration` s."""
    from app.pgm.domain import Domain
    from app.pgm.estimation import fit
    from app.pgm.measurement import Measurement

    domain = Domain.from_sizes(json.loads((DATA / "adult-domain.json").read_text()))
    with np.load(DATA / "adult-measurements-sigma10.npz", allow_pickle=False) as archive:
        measurements = [
            Measurement(tuple(k.split("|")), np.rint(archive[k]), "gaussian", MEASUREMENT_SIGMA)
            for k in archive.files
            if k != "sigma"
        ]
    deadline = time.monotonic() + duration
    fits = 0
    while time.monotonic() < deadline:
        fit(domain, measurements)
        fits += 1
    print(json.dumps({"fits": fits}), flush=True)


def run_fit_phase(
    server: Server, ids: dict[str, Any], config: dict[str, Any], embedded: bool
) -> dict[str, Any]:
    """The load again, while a model is being fitted beside the API."""
    if embedded:
        background = BackgroundFits(server, ids["api_key"], ids["dataset_id"])
        background.start()
        background.fitting_seen.wait(timeout=120)
        try:
            result = run_load_process(config, server.process.pid)
        finally:
            background.stop()
        result.update(
            background="embedded worker: one 2-way measurement + warm-started fit after another",
            fits_completed=background.fits_completed,
            model_versions=sorted(set(background.versions)),
            background_failures=background.failures[:3],
            measurement_post_ms_max=round(max(background.post_ms, default=0.0), 1),
        )
        return result
    emulator = subprocess.Popen(
        [sys.executable, __file__, "--fit-loop", str(config["duration"] + 5)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        result = run_load_process(config, server.process.pid)
    finally:
        out, _ = emulator.communicate(timeout=600)
    result.update(
        background="emulated: a separate process looping app.pgm.estimation.fit on Adult "
        "(--emulate-fits, or app.worker unavailable)",
        fits_completed=json.loads(out.strip().splitlines()[-1])["fits"],
    )
    return result


def worker_available() -> bool:
    try:
        from app.worker import start_embedded_workers  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration",
        type=float,
        default=20.0,
        help=f"seconds per phase (1..{MAX_DURATION_SECONDS})",
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (1..64)")
    parser.add_argument(
        "--max-cells", type=int, default=1000, help="largest marginal asked for, in cells"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-fit-phase", action="store_true")
    parser.add_argument(
        "--emulate-fits",
        action="store_true",
        help="background load from a fit-loop process, not the embedded worker",
    )
    parser.add_argument("--load-generator", metavar="CONFIG_JSON", help=argparse.SUPPRESS)
    parser.add_argument("--fit-loop", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_generator:
        load_generator_main(args.load_generator)
        return
    if args.fit_loop:
        fit_loop_main(args.fit_loop)
        return
    if not 1 <= args.duration <= MAX_DURATION_SECONDS:
        parser.error(f"--duration must be 1..{MAX_DURATION_SECONDS} seconds")
    if not 1 <= args.clients <= 64:
        parser.error("--clients must be 1..64")

    embedded = worker_available() and not args.emulate_fits
    with tempfile.TemporaryDirectory(prefix="privq-bench-") as tmp:
        server = Server(Path(tmp), embedded_worker=embedded)
        try:
            server.wait_ready()
            ids = setup_over_api(server, grant_rho=10.0)
            seeded = seed_fixed_measurements(
                server.database_url, ids["tenant_id"], ids["dataset_id"]
            )
            config = {
                "url": server.url,
                "api_key": ids["api_key"],
                "dataset_id": ids["dataset_id"],
                "duration": args.duration,
                "clients": args.clients,
                "max_cells": args.max_cells,
                "sizes": seeded["sizes"],
                "seed": args.seed,
            }
            # Warm the server's model cache and plans as any long-running server would be.
            warm = dict(config, duration=min(2.0, args.duration), seed=args.seed + 99)
            run_load_process(warm)
            idle = run_load_process(config, server.process.pid)
            fitting: dict[str, Any] | None = None
            if not args.skip_fit_phase:
                fitting = run_fit_phase(server, ids, config, embedded)
        finally:
            server.stop()
    report = {
        "benchmark": "free_queries_http",
        "clients": args.clients,
        "duration_s": args.duration,
        "max_marginal_cells": args.max_cells,
        "mix": "50% marginals (1-3 way), 25% GET /count, 25% POST /queries",
        "model": {"measurements": seeded["measurements"], "fit_seconds": seeded["fit_seconds"]},
        "requests_per_second": idle["requests_per_second"],
        "p50_ms": idle["p50_ms"],
        "p99_ms": idle["p99_ms"],
        "errors": idle["errors"],
        "server_cpu_ms_per_request": idle.get("server_cpu_ms_per_request"),
        "idle": idle,
        "while_fitting": fitting,
        "floors": FLOORS,
    }
    report["floors_met"] = (
        idle["requests_per_second"] >= FLOORS["requests_per_second"]
        and idle["p99_ms"] <= FLOORS["p99_ms"]
        and idle["errors"] == 0
        and (
            fitting is None
            or (fitting["p99_ms"] <= FLOORS["p99_ms_while_fitting"] and fitting["errors"] == 0)
        )
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
