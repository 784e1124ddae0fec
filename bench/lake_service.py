"""`bench/lake.py e2e`: a lake registered by reference with a real privq service, end to end.

`LakeService` starts `privq serve` on SQLite in a temporary folder, with no worker in its
process (`PRIVQ_WORKERS_IN_PROCESS=0`), and one `privq worker` process beside it, both
allowed to read the lake (`PRIVQ_SOURCE_ROOTS=file://<lake>/`), with an admin key given
through the environment; it stops them by pid. `e2e` then works over HTTP as a curator
and an analyst would: registers the lake's data folder with its schema and privacy unit,
grants a tenant, measures every one-way marginal and 20 pairs, and runs AIM over all
pairs at ε = 1, δ = 10⁻⁶ (ρ by the tight conversion), timing each step to its end and
reading the worker's peak resident memory (VmHWM) from /proc.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
POLL_SECONDS = 0.5


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LakeService:
    """The API and one worker as processes of their own on loopback, on SQLite."""

    def __init__(self, lake: Path, workdir: Path, env: dict[str, str] | None = None) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.admin_key = secrets.token_urlsafe(32)
        self.env = {
            **os.environ,
            "PRIVQ_DATABASE_URL": f"sqlite:///{workdir / 'privq.db'}",
            "PRIVQ_ADMIN_KEY": self.admin_key,
            "PRIVQ_WORKERS_IN_PROCESS": "0",
            "PRIVQ_SOURCE_ROOTS": lake.resolve().as_uri() + "/",
            "PRIVQ_LOG_LEVEL": os.environ.get("PRIVQ_LOG_LEVEL", "WARNING"),
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
        self.log_path = workdir / "service.log"
        self.log = open(self.log_path, "ab")  # noqa: SIM115 — closed in stop()
        privq = [sys.executable, "-m", "app.cli"]
        self.api = self._start([*privq, "serve", "--host", "127.0.0.1", "--port", str(port)])
        try:
            self._wait_healthy()
        except BaseException:
            self._end(self.api)
            self.log.close()
            raise
        # After the API: on SQLite `serve` brings the database up to date first.
        self.worker = self._start([*privq, "worker"])

    def _start(self, command: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command, env=self.env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT
        )

    def _wait_healthy(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.api.poll() is not None:
                raise RuntimeError(
                    f"the API exited with {self.api.returncode}; see {self.log_path}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.3)
        raise RuntimeError("the API did not become healthy")

    def worker_alive(self) -> None:
        if self.worker.poll() is not None:
            raise RuntimeError(f"the worker exited ({self.worker.returncode}); see {self.log_path}")

    def worker_peak_mb(self) -> float:
        """The worker's peak resident memory so far (VmHWM), in MB."""
        self.worker_alive()
        return round(status_kb(self.worker.pid, "VmHWM") / 1024, 1)

    def worker_rss_mb(self) -> float:
        self.worker_alive()
        return round(status_kb(self.worker.pid, "VmRSS") / 1024, 1)

    def reset_worker_peak(self) -> None:
        """VmHWM back to the current RSS (Linux ≥ 4.0: 5 to clear_refs), so that the
        next peak read is the next step's own."""
        with open(f"/proc/{self.worker.pid}/clear_refs", "w") as handle:
            handle.write("5")

    def worker_cpu_seconds(self) -> float:
        self.worker_alive()
        return cpu_seconds(self.worker.pid)

    def stop(self) -> None:
        self._end(self.worker)
        self._end(self.api)
        self.log.close()

    @staticmethod
    def _end(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _checked(response: httpx.Response, expected: int, what: str) -> dict[str, Any]:
    if response.status_code != expected:
        raise RuntimeError(f"{what}: {response.status_code} {response.text[:800]}")
    body: dict[str, Any] = response.json()
    return body


def _wait_job(
    client: httpx.Client, service: LakeService, job_id: str, timeout: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job once ended, and per stage of its progress: seconds seen in it and the
    worker's largest resident memory sampled meanwhile (every `POLL_SECONDS`)."""
    deadline = time.monotonic() + timeout
    last_progress = None
    stages: dict[str, dict[str, float]] = {}
    seen = time.monotonic()
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed"):
            return job, stages
        service.worker_alive()
        progress = job.get("progress") or {}
        now = time.monotonic()
        stage = stages.setdefault(str(progress.get("stage")), {"seconds": 0.0, "rss_mb": 0.0})
        stage["seconds"] = round(stage["seconds"] + now - seen, 1)
        stage["rss_mb"] = max(stage["rss_mb"], service.worker_rss_mb())
        seen = now
        if progress != last_progress:
            last_progress = progress
            clock = time.strftime("%H:%M:%S")
            print(f"  {clock} {json.dumps(progress)[:200]}", file=sys.stderr, flush=True)
        time.sleep(POLL_SECONDS)
    return {**job, "status": "timeout"}, stages


def e2e(
    lake: Path,
    workdir: Path,
    *,
    rows: int,
    schema: dict[str, Any],
    marginals: list[tuple[str, ...]],
    unit: dict[str, Any],
    epsilon: float,
    delta: float,
    measure_rho: float,
    timeout: float,
    aim_max_model_cells: int | None = None,
) -> dict[str, Any]:
    """Registration, a 40-marginal measurement and AIM over all pairs, over HTTP."""
    from app.privacy.accounting import rho_from_epsilon

    names = [attribute["name"] for attribute in schema["attributes"]]
    pairs = [list(pair) for pair in itertools.combinations(names, 2)]
    # AIM is asked for ε with δ (the service converts, rounding down); the grant holds
    # the measurement's ρ and that ρ, rounded up.
    aim_rho = math.ceil(rho_from_epsilon(epsilon, delta) * 1e9) / 1e9
    figures: dict[str, Any] = {"rows": rows, "workdir": str(workdir)}
    service = LakeService(lake, workdir)
    try:
        admin = httpx.Client(
            base_url=service.url,
            headers={"Authorization": f"Bearer {service.admin_key}"},
            timeout=600.0,
        )
        started = time.perf_counter()
        body = {
            "name": "lake",
            "schema": schema,
            "source": {"format": "parquet", "uri": (lake / "data").resolve().as_uri() + "/"},
            "privacy_unit": unit,
            "rho_total": round(measure_rho + aim_rho + 1.0, 9),
        }
        registered = _checked(admin.post("/v1/datasets", json=body), 202, "registration")
        dataset_id = registered["id"]
        job, stages = _wait_job(admin, service, registered["job_id"], timeout)
        dataset = admin.get(f"/v1/datasets/{dataset_id}").json()
        figures["register"] = {
            "seconds": round(time.perf_counter() - started, 1),
            "status": dataset["status"],
            "rows": dataset.get("rows"),
            "worker_peak_mb": service.worker_peak_mb(),
            "stages": stages,
        }
        if dataset["status"] != "ready":
            figures["register"]["error"] = dataset.get("error") or job.get("error")
            return figures

        tenant = _checked(admin.post("/v1/tenants", json={"name": "lake"}), 201, "tenant")
        grant = {"tenant_id": tenant["id"], "rho": round(measure_rho + aim_rho, 9)}
        _checked(admin.post(f"/v1/datasets/{dataset_id}/grants", json=grant), 201, "grant")
        analyst = httpx.Client(
            base_url=service.url,
            headers={"Authorization": f"Bearer {tenant['api_key']}"},
            timeout=600.0,
        )

        service.reset_worker_peak()
        cpu, started = service.worker_cpu_seconds(), time.perf_counter()
        request: dict[str, Any] = {
            "marginals": [list(m) for m in marginals],
            "noise": "gaussian",
            "rho": measure_rho,
        }
        submitted = _checked(
            analyst.post(f"/v1/datasets/{dataset_id}/measurements", json=request),
            202,
            "measurement",
        )
        job, stages = _wait_job(analyst, service, submitted["job_id"], timeout)
        seconds = time.perf_counter() - started
        figures["measure"] = {
            "marginals": len(marginals),
            "status": job["status"],
            "seconds": round(seconds, 1),
            "rows_per_s": round(rows / seconds),
            "worker_cpu_seconds": round(service.worker_cpu_seconds() - cpu, 1),
            "worker_peak_mb": service.worker_peak_mb(),
            "stages": stages,
        } | ({"error": job.get("error")} if job["status"] != "succeeded" else {})

        service.reset_worker_peak()
        cpu, started = service.worker_cpu_seconds(), time.perf_counter()
        request = {"epsilon": epsilon, "delta": delta, "workload": pairs}
        if aim_max_model_cells:
            request["max_model_cells"] = aim_max_model_cells
        submitted = _checked(
            analyst.post(f"/v1/datasets/{dataset_id}/mechanisms/aim", json=request),
            202,
            "AIM",
        )
        job, stages = _wait_job(analyst, service, submitted["job_id"], timeout)
        figures["aim"] = {
            "epsilon": epsilon,
            "delta": delta,
            "rho": round(aim_rho, 9),
            "workload_pairs": len(pairs),
            "max_model_cells": aim_max_model_cells or "the service's",
            "status": job["status"],
            "seconds": round(time.perf_counter() - started, 1),
            "worker_cpu_seconds": round(service.worker_cpu_seconds() - cpu, 1),
            "worker_peak_mb": service.worker_peak_mb(),
            "stages": stages,
            # The last round, without the per-pair bounds the progress also carries.
            "progress": {
                k: v for k, v in (job.get("progress") or {}).items() if k != "unmeasured_bounds"
            },
        } | ({"error": job.get("error")} if job["status"] != "succeeded" else {})
        steps = ("register", "measure", "aim")
        model = analyst.get(f"/v1/datasets/{dataset_id}/model")
        if model.status_code == 200:
            fitted = model.json()
            figures["aim"]["model"] = {
                k: fitted.get(k) for k in ("version", "iterations", "loss")
            } | {"cliques": len(fitted.get("cliques") or [])}
        # Each step's peak is its own (reset before it): the worker's is the largest.
        figures["worker_peak_mb"] = max(figures[step]["worker_peak_mb"] for step in steps)
    finally:
        service.stop()
    return figures
