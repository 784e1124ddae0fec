"""The service under benchmark as real processes: API (and workers), their memory, the API calls.

`Service` starts `privq serve` on loopback — on SQLite with its embedded worker (a
spawned child process), on PostgreSQL (scratch database `privq_scale`, dropped and
created anew) with `--workers-in-process 0` and separate `privq worker` processes —
and stops them by pid. Peak RSS is read from each process's own /proc status (VmHWM),
reset before a step through /proc/<pid>/clear_refs. `Api` makes the admin and tenant
calls the benchmarks need.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from scale_data import Network, total_variation

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432"
SCRATCH_DATABASE = "privq_scale"


# ---- processes and their memory ------------------------------------------------------


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def peak_mb(pid: int) -> float:
    return round(status_kb(pid, "VmHWM") / 1024, 1)


def rss_mb(pid: int) -> float:
    return round(status_kb(pid, "VmRSS") / 1024, 1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent not idle (all cores, /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def command_cpu_seconds(command: str) -> float:
    """CPU seconds of every running process named `command` (e.g. postgres)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == command:
                    total += cpu_seconds(int(entry.name))
    return total


def reset_peak(pid: int) -> None:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0: write 5 to clear_refs)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as handle:
        handle.write("5")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


class Service:
    """The API (and workers) as processes of their own on loopback, stopped by pid."""

    def __init__(self, backend: str, workdir: Path, port: int, workers: int) -> None:
        self.backend = backend
        self.url = f"http://127.0.0.1:{port}"
        self.admin_key = secrets.token_urlsafe(32)
        if backend == "sqlite":
            database_url = f"sqlite:///{workdir / 'scale.db'}"
            (workdir / "scale.db").unlink(missing_ok=True)
        else:
            database_url = f"{POSTGRES_ADMIN_URL}/{SCRATCH_DATABASE}"
            subprocess.run(
                ["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", SCRATCH_DATABASE],
                check=True,
            )
            subprocess.run(
                ["createdb", "-h", "127.0.0.1", "-U", "postgres", SCRATCH_DATABASE], check=True
            )
        self.database_url = database_url
        self.env = {
            **os.environ,
            "PRIVQ_DATABASE_URL": database_url,
            "PRIVQ_ADMIN_KEY": self.admin_key,
            "PRIVQ_LOG_LEVEL": os.environ.get("PRIVQ_LOG_LEVEL", "WARNING"),
            "PRIVQ_MAX_UPLOAD_BYTES": str(8 * 1024**3),
        }
        self.workdir = workdir
        self.log = open(workdir / f"service-{backend}.log", "ab")  # noqa: SIM115 — closed in stop()
        privq = [sys.executable, "-m", "app.cli"]
        if backend == "postgres":
            subprocess.run([*privq, "migrate"], env=self.env, check=True, cwd=ROOT)
        serve = [*privq, "serve", "--host", "127.0.0.1", "--port", str(port)]
        if backend == "postgres":
            serve += ["--workers-in-process", "0"]
        self.api = self._start(serve)
        self.workers: list[subprocess.Popen[bytes]] = []
        if backend == "postgres":
            self.add_workers(workers)

    def _start(self, command: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command, env=self.env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT
        )

    def add_workers(self, count: int) -> None:
        for _ in range(count):
            self.workers.append(self._start([sys.executable, "-m", "app.cli", "worker"]))

    def stop_workers(self) -> None:
        for worker in self.workers:
            _stop(worker)
        self.workers = []

    def worker_pids(self) -> list[int]:
        if self.workers:
            return [w.pid for w in self.workers]
        # `privq serve` on SQLite: the embedded worker is a spawned child of the API.
        pids = []
        for pid in children(self.api.pid):
            with contextlib.suppress(OSError):
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"spawn_main" in command and b"resource_tracker" not in command:
                    pids.append(pid)
        return pids

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.api.poll() is not None:
                raise RuntimeError(
                    f"the API exited with {self.api.returncode}; see {self.log.name}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.3)
        raise RuntimeError("the API did not become healthy")

    def reset_peaks(self) -> None:
        for pid in [self.api.pid, *self.worker_pids()]:
            reset_peak(pid)

    def api_peak_mb(self) -> float:
        return peak_mb(self.api.pid)

    def worker_peak_mb(self) -> float:
        return max((peak_mb(pid) for pid in self.worker_pids()), default=float("nan"))

    def worker_cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.worker_pids())

    def stop(self) -> None:
        self.stop_workers()
        _stop(self.api)
        self.log.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---- the API -----------------------------------------------------------------------------


class Api:
    """Admin and tenant calls the steps need."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.admin = httpx.Client(
            base_url=service.url,
            headers={"Authorization": f"Bearer {service.admin_key}"},
            timeout=3600.0,
        )
        tenant = self.admin.post("/v1/tenants", json={"name": "scale"})
        tenant.raise_for_status()
        self.tenant_id = tenant.json()["id"]
        self.api_key = tenant.json()["api_key"]
        self.tenant = httpx.Client(
            base_url=service.url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=600.0,
        )

    def upload(self, name: str, csv_path: Path, schema: dict[str, Any], rho: float) -> str:
        with open(csv_path, "rb") as handle:
            response = self.admin.post(
                "/v1/datasets",
                data={"name": name, "schema": json.dumps(schema)},
                files={"file": (csv_path.name, handle, "text/csv")},
            )
        if response.status_code != 201:
            raise RuntimeError(f"upload failed: {response.status_code} {response.text[:500]}")
        dataset_id: str = response.json()["id"]
        grant = self.admin.post(
            f"/v1/datasets/{dataset_id}/grants", json={"tenant_id": self.tenant_id, "rho": rho}
        )
        grant.raise_for_status()
        return dataset_id

    def submit(self, dataset_id: str, path: str, body: dict[str, Any]) -> str:
        response = self.tenant.post(f"/v1/datasets/{dataset_id}{path}", json=body)
        if response.status_code != 202:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:500]}")
        return str(response.json()["job_id"])

    def wait(self, job_id: str, timeout: float, verbose: bool = False) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last = None
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.tenant.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in ("succeeded", "failed"):
                return job
            progress = job.get("progress") or {}
            if verbose and progress.get("round") != last:
                last = progress.get("round")
                print(f"  … {json.dumps(progress)[:200]}", file=sys.stderr, flush=True)
            time.sleep(0.1)
        return {**job, "status": "timeout", "job_id": job_id}

    def model_error(
        self, dataset_id: str, network: Network, attr_sets: list[tuple[str, ...]]
    ) -> dict[str, Any]:
        """Mean and max TV of the model's marginals from the network's exact ones."""
        distances, refused = [], []
        for attrs in attr_sets:
            response = self.tenant.get(
                f"/v1/datasets/{dataset_id}/marginals", params={"attrs": ",".join(attrs)}
            )
            if response.status_code != 200:
                refused.append(
                    {
                        "attributes": list(attrs),
                        "status": response.status_code,
                        "error": response.json().get("error", {}).get("code"),
                    }
                )
                continue
            counts = np.asarray(response.json()["counts"], dtype=float)
            distances.append(total_variation(counts, network.exact_marginal(attrs)))
        return {
            "mean_tv": round(float(np.mean(distances)), 5) if distances else None,
            "max_tv": round(float(np.max(distances)), 5) if distances else None,
            "answered": len(distances),
            "refused": refused[:5],
            "refused_count": len(refused),
        }
