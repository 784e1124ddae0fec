"""Can one tenant stall the others? Another tenant's writes while the largest request draws.

Starts `privq serve` on a scratch SQLite file (`--backend postgres`: a scratch database
and a separate worker) with the service's default caps. Tenant A asks for the largest
request the service accepts at ρ = 1e-9: as many 1,000,000-cell marginals as fit in
`max_request_cells` (4 by default), each drawn by OpenDP's exact sampler for seconds.
While its job is measuring, tenant B sends small measurement requests (a POST every
`--interval` s), and before it the same requests with nothing else running. Prints one
JSON line: B's POST latency (median, p99, max) during A's draw and at rest, how many
B sent during the draw, and how long A's job took.

    .venv/bin/python bench/stall.py [--backend sqlite|postgres]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_service import Api, Service  # the sibling bench's processes

WIDE = 1000  # 1000 × 1000 = 1,000,000 cells, the default max_marginal_cells
MAX_REQUEST_CELLS = 4_000_000  # the default PRIVQ_MAX_REQUEST_CELLS


def table(path: Path) -> dict[str, Any]:
    schema = {
        "attributes": [
            {"name": "x", "type": "integer", "size": WIDE},
            {"name": "y", "type": "integer", "size": WIDE},
            {"name": "z", "type": "integer", "size": 3},
        ]
    }
    rng = np.random.default_rng(3)
    xs, ys, zs = (rng.integers(size, size=20000) for size in (WIDE, WIDE, 3))
    lines = ["x,y,z", *(f"{a},{b},{c}" for a, b, c in zip(xs, ys, zs, strict=True))]
    path.write_text("\n".join(lines) + "\n")
    return schema


def writes(client: httpx.Client, dataset: str, *, until: Any, interval: float) -> list[float]:
    """B's POSTs until `until()` is true; each one's latency in seconds."""
    waits = []
    while not until():
        started = time.perf_counter()
        response = client.post(
            f"/v1/datasets/{dataset}/measurements", json={"marginals": [["z"]], "rho": 1e-6}
        )
        waits.append(time.perf_counter() - started)
        if response.status_code != 202:
            raise RuntimeError(f"B's write: {response.status_code} {response.text[:300]}")
        time.sleep(interval)
    return waits


def figures(waits: list[float]) -> dict[str, float | int]:
    ms = np.asarray(waits) * 1000
    return {
        "count": len(waits),
        "median_ms": round(float(statistics.median(ms)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "max_ms": round(float(ms.max()), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--port", type=int, default=8473)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="privq-stall-"))
    service = Service(args.backend, workdir, args.port, workers=1)
    try:
        service.wait_ready()
        api = Api(service)
        dataset = api.upload("stall", workdir / "stall.csv", table(workdir / "stall.csv"), 10)
        other = api.admin.post("/v1/tenants", json={"name": "other"}).json()
        api.admin.post(
            f"/v1/datasets/{dataset}/grants", json={"tenant_id": other["id"], "rho": 10}
        ).raise_for_status()
        b = httpx.Client(
            base_url=service.url,
            headers={"Authorization": f"Bearer {other['api_key']}"},
            timeout=600.0,
        )
        # B at rest; its jobs are tiny and the worker clears them before A starts.
        rest_end = time.monotonic() + 5
        at_rest = writes(
            b, dataset, until=lambda: time.monotonic() > rest_end, interval=args.interval
        )
        time.sleep(5)
        count = MAX_REQUEST_CELLS // (WIDE * WIDE)
        started = time.monotonic()
        job_id = api.submit(
            dataset, "/measurements", {"marginals": [["x", "y"]] * count, "rho": 1e-9}
        )
        while api.tenant.get(f"/v1/jobs/{job_id}").json()["progress"].get("stage") != "measuring":
            time.sleep(0.01)

        def a_drawn() -> bool:
            job = api.tenant.get(f"/v1/jobs/{job_id}").json()
            return job["status"] != "running" or job["progress"].get("stage") != "measuring"

        during = writes(b, dataset, until=a_drawn, interval=args.interval)
        final = api.wait(job_id, timeout=3600)
        seconds = time.monotonic() - started
    finally:
        service.stop()
    print(
        json.dumps(
            {
                "bench": "stall",
                "backend": args.backend,
                "a_request_cells": count * WIDE * WIDE,
                "a_job_status": final["status"],
                "a_job_seconds": round(seconds, 1),
                "b_writes_at_rest": figures(at_rest),
                "b_writes_during_a_draw": figures(during),
            }
        )
    )


if __name__ == "__main__":
    main()
