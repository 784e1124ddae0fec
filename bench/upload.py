"""Benchmark: time and peak memory of a CSV and a Parquet upload, with and without
missing values (default 1,000,000 rows × 15 columns; the issue's figure is
`--rows 2000000 --columns 40`).

Generates a seeded table (columns cycling through 5 categorical, 5 numeric — two of
them clipped, with values beyond their edges — and 5 integer templates; one
categorical value contains a comma and is quoted in the CSV) into a temporary
directory, written both as CSV and as Parquet (typed columns: strings, float64, int64;
with `--missing`, 5% of every column's cells empty / null and every attribute
`"missing": true`), then measures for each file

(a) `app.ingest.encode_upload` on the file, in a fresh child process: wall and CPU
    seconds, rows per second, and the peak RSS increase over the child's RSS after
    imports (/proc/self/status VmHWM − VmRSS before encoding);
(b) the full HTTP upload: a real uvicorn server (`create_app` via `--factory`, temp
    SQLite file, no in-process workers) started in a subprocess on 127.0.0.1, the file
    posted with httpx as multipart; wall seconds, rows per second, and the server
    process's peak RSS (VmHWM) and its increase over its RSS before the upload.

Both check the result: (a) the per-column code sums equal those of the generated
codes (a missing cell counts as the last code), (b) the response reports every row.

Prints ONE JSON line: the shape, then one entry of figures per (format, missing).

    .venv/bin/python bench/upload.py [--rows 1000000] [--columns 15]
        [--formats csv,parquet] [--missing no|yes|both] [--skip-http]

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


TEMPLATES = (
    [("categorical", i) for i in range(len(CATEGORIES))]
    + [("numeric", i) for i in range(len(NUMERIC))]
    + [("integer", i) for i in range(len(INTEGER_SIZES))]
)
# With --missing, this share of every column's cells is missing (an empty CSV cell, a
# Parquet null), and every attribute has "missing": true.
MISSING_SHARE = 0.05


def column_plan(columns: int) -> list[tuple[str, str, int]]:
    """(name, kind, template index) of each column: the 15 templates, repeated."""
    plan = []
    for j in range(columns):
        kind, index = TEMPLATES[j % len(TEMPLATES)]
        plan.append((f"{kind[:3]}{index}_{j}", kind, index))
    return plan


def schema_json(columns: int = 15, missing: bool = False) -> dict[str, Any]:
    attributes: list[dict[str, Any]] = []
    for name, kind, index in column_plan(columns):
        if kind == "categorical":
            attribute: dict[str, Any] = {"name": name, "type": kind, "values": CATEGORIES[index]}
        elif kind == "numeric":
            bins, clip, _, _ = NUMERIC[index]
            attribute = {"name": name, "type": kind, "bins": [float(e) for e in bins], "clip": clip}
        else:
            attribute = {"name": name, "type": kind, "size": INTEGER_SIZES[index]}
        if missing:
            attribute["missing"] = True
        attributes.append(attribute)
    return {"attributes": attributes}


def generate(
    workdir: Path, rows: int, columns: int, missing: bool, formats: list[str]
) -> tuple[dict[str, Path], dict[str, int]]:
    """Write the table as CSV and/or Parquet; return the paths and the expected sum of
    codes of every column (a missing cell is the last code)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(SEED)
    plan = column_plan(columns)
    code_sums = {name: 0 for name, _, _ in plan}
    # Columns in a different order from the schema, as a curator's file may be.
    file_order = list(reversed(plan))
    suffix = "-missing" if missing else ""
    paths = {fmt: workdir / f"upload{suffix}.{fmt}" for fmt in formats}
    csv_handle = paths["csv"].open("w", encoding="utf-8", newline="") if "csv" in paths else None
    parquet_writer = None
    try:
        if csv_handle is not None:
            csv_handle.write(",".join(name for name, _, _ in file_order) + "\n")
        for start in range(0, rows, GENERATION_BLOCK_ROWS):
            n = min(GENERATION_BLOCK_ROWS, rows - start)
            cells: dict[str, np.ndarray] = {}
            arrays: dict[str, Any] = {}
            for name, kind, index in plan:
                absent = rng.random(n) < MISSING_SHARE if missing else np.zeros(n, dtype=bool)
                if kind == "categorical":
                    values = CATEGORIES[index]
                    codes = rng.integers(0, len(values), n)
                    quoted = np.array([f'"{v}"' if "," in v else v for v in values])
                    text = quoted[codes]
                    typed: Any = np.asarray(values, dtype=object)[codes]
                    size = len(values)
                elif kind == "numeric":
                    bins, clip, mean, std = NUMERIC[index]
                    edges = np.asarray(bins, dtype=np.float64)
                    x = np.round(rng.normal(mean, std, n), 2)
                    if not clip:
                        x = np.clip(x, edges[0], edges[-1])
                    codes = (
                        np.searchsorted(edges, np.clip(x, edges[0], edges[-1]), side="right") - 1
                    )
                    codes = np.minimum(codes, len(edges) - 2)
                    text, typed, size = x.astype(str), x, len(edges) - 1
                else:
                    size = INTEGER_SIZES[index]
                    codes = rng.integers(0, size, n)
                    text, typed = codes.astype(str), codes
                codes = np.where(absent, size, codes)
                code_sums[name] += int(codes.sum())
                if absent.any():
                    text = np.where(absent, "", text)
                cells[name] = text
                arrays[name] = pa.array(typed, mask=absent if missing else None)
            if csv_handle is not None:
                listed = [cells[name].tolist() for name, _, _ in file_order]
                csv_handle.write("\n".join(map(",".join, zip(*listed, strict=True))) + "\n")
            if "parquet" in paths:
                table = pa.table({name: arrays[name] for name, _, _ in file_order})
                if parquet_writer is None:
                    parquet_writer = pq.ParquetWriter(paths["parquet"], table.schema)
                parquet_writer.write_table(table)
    finally:
        if csv_handle is not None:
            csv_handle.close()
        if parquet_writer is not None:
            parquet_writer.close()
    return paths, code_sums


def proc_status_kb(pid: int | str, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def encode_in_this_process(path: str, columns: int, missing: bool) -> None:
    """Child mode: encode the file and print timing, memory and code sums as JSON."""
    from app.ingest import encode_upload
    from app.schema import parse_schema

    schema = parse_schema(json.dumps(schema_json(columns, missing)))
    baseline_kb = proc_status_kb("self", "VmRSS")
    wall, cpu = time.perf_counter(), time.process_time()
    with open(path, "rb") as handle:
        table = encode_upload(handle, schema)
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


def measure_encode(
    path: Path, expected_sums: dict[str, int], columns: int, missing: bool
) -> dict[str, Any]:
    command = [sys.executable, __file__, "--encode-child", str(path), "--columns", str(columns)]
    command += ["--missing", "yes" if missing else "no"]
    result = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if report["code_sums"] != expected_sums:
        raise SystemExit(f"encoded codes differ from the generated ones ({path.name})")
    return report


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure_http(path: Path, workdir: Path, rows: int, schema: dict[str, Any]) -> dict[str, Any]:
    import httpx

    port = free_port()
    env = dict(os.environ)
    env.update(
        {
            "PRIVQ_DATABASE_URL": f"sqlite:///{workdir / (path.name + '.db')}",
            "PRIVQ_ADMIN_KEY": ADMIN_KEY,
            "PRIVQ_WORKERS_IN_PROCESS": "0",
            "PRIVQ_AUTO_MIGRATE": "true",
            "PRIVQ_MAX_UPLOAD_BYTES": str(path.stat().st_size * 2),
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
        parquet = path.suffix == ".parquet"
        content_type = "application/vnd.apache.parquet" if parquet else "text/csv"
        with path.open("rb") as handle:
            started = time.perf_counter()
            response = httpx.post(
                f"{base_url}/v1/datasets",
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                data={"name": "bench", "schema": json.dumps(schema)},
                files={"file": (path.name, handle, content_type)},
                timeout=1800,
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


def run_variant(
    workdir: Path, rows: int, columns: int, missing: bool, formats: list[str], skip_http: bool
) -> list[dict[str, Any]]:
    started = time.perf_counter()
    paths, expected_sums = generate(workdir, rows, columns, missing, formats)
    generate_seconds = time.perf_counter() - started
    runs = []
    for fmt, path in paths.items():
        encoded = measure_encode(path, expected_sums, columns, missing)
        run: dict[str, Any] = {
            "format": fmt,
            "missing": missing,
            "file_mb": round(path.stat().st_size / 2**20, 1),
            "generate_seconds": round(generate_seconds, 2),
            "encode_seconds": round(encoded["seconds"], 2),
            "encode_cpu_seconds": round(encoded["cpu_seconds"], 2),
            "encode_rows_per_second": round(rows / encoded["seconds"]),
            "encode_peak_mb": round(encoded["peak_increase_mb"], 1),
            "encoded_codes_mb": round(encoded["code_bytes_mb"], 1),
        }
        if not skip_http:
            http = measure_http(path, workdir, rows, schema_json(columns, missing))
            run.update(
                {
                    "http_upload_seconds": round(http["seconds"], 2),
                    "http_rows_per_second": round(rows / http["seconds"]),
                    "http_server_peak_mb": round(http["server_peak_mb"], 1),
                    "http_server_peak_increase_mb": round(http["server_peak_increase_mb"], 1),
                }
            )
        runs.append(run)
        path.unlink()  # keep the temporary folder small
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--columns", type=int, default=15)
    parser.add_argument(
        "--formats", default="csv,parquet", help="comma-separated: csv, parquet (default both)"
    )
    parser.add_argument(
        "--missing",
        choices=("no", "yes", "both"),
        default="both",
        help="files without missing values, with 5%% missing cells, or both (default)",
    )
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--encode-child", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.encode_child:
        encode_in_this_process(args.encode_child, args.columns, args.missing == "yes")
        return
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    variants = {"no": [False], "yes": [True], "both": [False, True]}[args.missing]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="privq-bench-upload-") as tmp:
        for missing in variants:
            runs.extend(
                run_variant(Path(tmp), args.rows, args.columns, missing, formats, args.skip_http)
            )
    result = {
        "rows": args.rows,
        "columns": args.columns,
        "missing_share": MISSING_SHARE,
        "http_mode": None if args.skip_http else "uvicorn subprocess, SQLite, httpx multipart",
        "runs": runs,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
