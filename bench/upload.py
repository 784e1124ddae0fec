"""Benchmark: time and peak memory of a 1,000,000-row × 15-column CSV upload.

Generates a seeded CSV (5 categorical, 5 numeric — two of them clipped, with values
beyond their edges — and 5 integer columns; one categorical value contains a comma
and is quoted) into a temporary directory, then measures

(a) `app.ingest.encode_csv` on the file, in a fresh child process: wall and CPU
    seconds, and the peak RSS increase over the child's RSS after imports
    (/proc/self/status VmHWM − VmRSS before encoding);
(b) the full HTTP upload: a real uvicorn server (`create_app` via `--factory`, temp
    SQLite file, no in-process workers) started in a subprocess on 127.0.0.1, the file
    posted with httpx as multipart; wall seconds of the request and the server
    process's peak RSS (VmHWM) and its increase over its RSS before the upload.

Both check the result: (a) the per-column code sums equal those of the generated
codes, (b) the response reports every row.

Prints ONE JSON line.

    .venv/bin/python bench/upload.py [--rows 1000000] [--skip-http]

(The machine may be shared: CPU seconds are the steadier figure.)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SEED = 20240601
GENERATION_BLOCK_ROWS = 100_000
ADMIN_KEY = "bench-admin-key-" + "k" * 32

CATEGORIES = [
    ["F", "M"],
    ["Private", "Self-emp", "Federal-gov", "Local-gov", "State-gov", "Without-pay", "Never-worked"],
    ["Married, spouse present", "Divorced", "Never-married", "Separated", "Widowed"],
    [f"occupation-{i:02d}" for i in range(15)],
    [f"country-{i:02d}" for i in range(42)],
]
# (bins, clip, mean, std) — the clipped ones have values beyond their edges.
NUMERIC = [
    ([0, 18, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 80, 120], False, 40.0, 12.0),
    ([0, 1000, 2000, 5000, 10000, 20000, 50000, 100000], True, 20000.0, 30000.0),
    (list(np.linspace(0, 100, 21)), False, 50.0, 15.0),
    ([-3, -2, -1, -0.5, 0, 0.5, 1, 2, 3], True, 0.0, 1.2),
    (list(np.linspace(0, 1, 101)), False, 0.5, 0.15),
]
INTEGER_SIZES = [2, 16, 85, 100, 99]


def schema_json() -> dict[str, Any]:
    attributes: list[dict[str, Any]] = []
    for i, values in enumerate(CATEGORIES):
        attributes.append({"name": f"cat{i}", "type": "categorical", "values": values})
    for i, (bins, clip, _, _) in enumerate(NUMERIC):
        attributes.append(
            {"name": f"num{i}", "type": "numeric", "bins": [float(e) for e in bins], "clip": clip}
        )
    for i, size in enumerate(INTEGER_SIZES):
        attributes.append({"name": f"int{i}", "type": "integer", "size": size})
    return {"attributes": attributes}


def generate_csv(path: Path, rows: int) -> dict[str, int]:
    """Write the CSV; return the expected sum of codes of every column."""
    rng = np.random.default_rng(SEED)
    names = [a["name"] for a in schema_json()["attributes"]]
    code_sums = dict.fromkeys(names, 0)
    # Columns in a different order from the schema, as a curator's file may be.
    file_order = names[::-1]
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(",".join(file_order) + "\n")
        for start in range(0, rows, GENERATION_BLOCK_ROWS):
            n = min(GENERATION_BLOCK_ROWS, rows - start)
            cells: dict[str, np.ndarray] = {}
            for i, values in enumerate(CATEGORIES):
                codes = rng.integers(0, len(values), n)
                quoted = np.array([f'"{v}"' if "," in v else v for v in values])
                cells[f"cat{i}"] = quoted[codes]
                code_sums[f"cat{i}"] += int(codes.sum())
            for i, (bins, clip, mean, std) in enumerate(NUMERIC):
                edges = np.asarray(bins, dtype=np.float64)
                x = np.round(rng.normal(mean, std, n), 2)
                if not clip:
                    x = np.clip(x, edges[0], edges[-1])
                codes = np.searchsorted(edges, np.clip(x, edges[0], edges[-1]), side="right") - 1
                codes = np.minimum(codes, len(edges) - 2)
                cells[f"num{i}"] = x.astype(str)
                code_sums[f"num{i}"] += int(codes.sum())
            for i, size in enumerate(INTEGER_SIZES):
                codes = rng.integers(0, size, n)
                cells[f"int{i}"] = codes.astype(str)
                code_sums[f"int{i}"] += int(codes.sum())
            columns = [cells[name].tolist() for name in file_order]
            handle.write("\n".join(map(",".join, zip(*columns, strict=True))) + "\n")
    return code_sums


def proc_status_kb(pid: int | str, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def encode_in_this_process(csv_path: str) -> None:
    """Child mode: encode the file and print timing, memory and code sums as JSON."""
    from app.ingest import encode_csv
    from app.schema import parse_schema

    schema = parse_schema(json.dumps(schema_json()))
    baseline_kb = proc_status_kb("self", "VmRSS")
    wall, cpu = time.perf_counter(), time.process_time()
    with open(csv_path, "rb") as handle:
        table = encode_csv(handle, schema)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak_kb = proc_status_kb("self", "VmHWM")
    print(
        json.dumps(
            {
                "rows": table.rows,
                "seconds": wall,
                "cpu_seconds": cpu,
                "peak_increase_mb": (peak_kb - baseline_kb) / 1024,
                "code_bytes_mb": sum(c.nbytes for c in table.columns.values()) / 2**20,
                "code_sums": {
                    name: int(c.sum(dtype=np.int64)) for name, c in table.columns.items()
                },
            }
        )
    )


def measure_encode(csv_path: Path, expected_sums: dict[str, int]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, __file__, "--encode-child", str(csv_path)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if report["code_sums"] != expected_sums:
        raise SystemExit(f"encoded codes differ from the generated ones: {report['code_sums']}")
    return report


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure_http(csv_path: Path, workdir: Path, rows: int) -> dict[str, Any]:
    import httpx

    port = free_port()
    env = dict(os.environ)
    env.update(
        {
            "PRIVQ_DATABASE_URL": f"sqlite:///{workdir / 'bench.db'}",
            "PRIVQ_ADMIN_KEY": ADMIN_KEY,
            "PRIVQ_WORKERS_IN_PROCESS": "0",
            "PRIVQ_AUTO_MIGRATE": "true",
            "PRIVQ_MAX_UPLOAD_BYTES": str(csv_path.stat().st_size * 2),
            "PRIVQ_LOG_LEVEL": "WARNING",
        }
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "app.api:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise SystemExit(f"server exited: {server.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("server did not become healthy within 60 s")
            time.sleep(0.2)
        before_kb = proc_status_kb(server.pid, "VmRSS")
        with csv_path.open("rb") as handle:
            started = time.perf_counter()
            response = httpx.post(
                f"{base_url}/v1/datasets",
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                data={"name": "bench", "schema": json.dumps(schema_json())},
                files={"file": ("bench.csv", handle, "text/csv")},
                timeout=600,
            )
            seconds = time.perf_counter() - started
        peak_kb = proc_status_kb(server.pid, "VmHWM")
        if response.status_code != 201:
            raise SystemExit(f"upload failed: {response.status_code} {response.text[:500]}")
        reported_rows = response.json().get("rows")
        if reported_rows != rows:
            raise SystemExit(f"upload reported {reported_rows} rows, expected {rows}")
        return {
            "seconds": seconds,
            "server_peak_mb": peak_kb / 1024,
            "server_peak_increase_mb": (peak_kb - before_kb) / 1024,
        }
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--encode-child", metavar="CSV", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.encode_child:
        encode_in_this_process(args.encode_child)
        return
    with tempfile.TemporaryDirectory(prefix="privq-bench-upload-") as tmp:
        workdir = Path(tmp)
        csv_path = workdir / "upload.csv"
        started = time.perf_counter()
        expected_sums = generate_csv(csv_path, args.rows)
        generate_seconds = time.perf_counter() - started
        encoded = measure_encode(csv_path, expected_sums)
        result: dict[str, Any] = {
            "rows": encoded["rows"],
            "columns": len(expected_sums),
            "file_mb": round(csv_path.stat().st_size / 2**20, 1),
            "generate_seconds": round(generate_seconds, 2),
            "encode_seconds": round(encoded["seconds"], 2),
            "encode_cpu_seconds": round(encoded["cpu_seconds"], 2),
            "encode_peak_mb": round(encoded["peak_increase_mb"], 1),
            "encoded_codes_mb": round(encoded["code_bytes_mb"], 1),
        }
        if not args.skip_http:
            http = measure_http(csv_path, workdir, args.rows)
            result.update(
                {
                    "http_upload_seconds": round(http["seconds"], 2),
                    "http_server_peak_mb": round(http["server_peak_mb"], 1),
                    "http_server_peak_increase_mb": round(http["server_peak_increase_mb"], 1),
                    "http_mode": "uvicorn subprocess on 127.0.0.1, SQLite, httpx multipart",
                }
            )
        print(json.dumps(result))


if __name__ == "__main__":
    main()
