"""The lake step of the deployment check: a source registered by reference, end to end.

`bench/deploy.py` runs it on the stack it brought up: a generated Parquet lake is written
into the folder the stack mounts read-only at /srv/lake (PRIVQ_LAKE), registered through
the HTTP API (`POST /v1/datasets` with a JSON body naming `file:///srv/lake/visits/`),
polled until `ready`, granted to a tenant, measured (every one-way marginal and a few
pairs in one job) and modelled by AIM, then answered. The workers count it with the
stack's engine: the local one by default, Spark through the Connect server with
`--spark`; the Spark workers' CPU time shows that Spark did the counting.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

LAKE_ROWS = 200_000
LAKE_FILES = 4
SOURCE_FOLDER = "visits"  # under the lake: file:///srv/lake/visits/ in every container
# Eight attributes of every kind, three with missing values; the unit is a person, seen
# on 1.6 rows on average and counted at most twice.
SCHEMA: dict[str, Any] = {
    "attributes": [
        {
            "name": "region",
            "type": "categorical",
            "values": ["north", "south", "east", "west", "centre", "islands"],
            "missing": True,
        },
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120], "missing": True},
        {"name": "sex", "type": "categorical", "values": ["f", "m"]},
        {"name": "income", "type": "numeric", "bins": [0, 20000, 40000, 80000, 1000000]},
        {"name": "children", "type": "integer", "size": 6, "missing": True},
        {"name": "employed", "type": "categorical", "values": ["no", "part", "full"]},
        {"name": "visits", "type": "integer", "size": 8},
        {"name": "smoker", "type": "categorical", "values": ["no", "yes"]},
    ]
}
UNIT = {"column": "person_id", "max_rows": 2}
ATTRIBUTES = [a["name"] for a in SCHEMA["attributes"]]
PAIRS = [["age", "income"], ["region", "employed"], ["sex", "smoker"], ["children", "visits"]]
MEASURE = {
    "marginals": [[a] for a in ATTRIBUTES] + PAIRS,
    "noise": "gaussian",
    "rho": 0.2,
}
AIM = {"rho": 0.3, "workload": [*PAIRS, ["age", "employed"], ["region", "income"]]}


class Caller(Protocol):
    def call(self, method: str, path: str, expect: int, **kwargs: Any) -> dict[str, Any]: ...


def lake_table(rows: int, seed: int) -> pa.Table:
    """`rows` generated visits: the schema's columns (some nulls), a person id, and a
    column the schema does not name (ignored by privq)."""
    rng = np.random.default_rng(seed)

    def categorical(values: list[str], missing: float = 0.0) -> pa.Array:
        picked = np.asarray(values, dtype=object)[rng.integers(0, len(values), rows)]
        return pa.array(picked, type=pa.string(), mask=rng.random(rows) < missing)

    def numbers(low: float, high: float, missing: float = 0.0) -> pa.Array:
        return pa.array(rng.uniform(low, high, rows), mask=rng.random(rows) < missing)

    regions = SCHEMA["attributes"][0]["values"]
    return pa.table(
        {
            "person_id": pa.array(rng.integers(0, int(rows / 1.6), rows), type=pa.int64()),
            "region": categorical(regions, missing=0.05),
            "age": numbers(0, 100, missing=0.02),
            "sex": categorical(["f", "m"]),
            "income": numbers(0, 200000),
            "children": pa.array(rng.integers(0, 6, rows), mask=rng.random(rows) < 0.1),
            "employed": categorical(["no", "part", "full"]),
            "visits": pa.array(rng.integers(0, 8, rows), type=pa.int32()),
            "smoker": categorical(["no", "yes"]),
            "note": categorical(["not", "in", "the", "schema"]),
        }
    )


def write_lake(lake: Path, rows: int = LAKE_ROWS, seed: int = 7) -> dict[str, Any]:
    """Writes the source as LAKE_FILES Parquet files under `lake`/visits/, readable by
    every uid (privq and Spark read it as uid 10001)."""
    folder = lake / SOURCE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    table = lake_table(rows, seed)
    step = -(-rows // LAKE_FILES)
    for index in range(LAKE_FILES):
        path = folder / f"part-{index:05d}.parquet"
        pq.write_table(table.slice(index * step, step), path, row_group_size=20_000)
        os.chmod(path, 0o644)
    for path in (lake, folder):
        os.chmod(path, 0o755)
    size = sum(p.stat().st_size for p in folder.iterdir())
    return {"rows": rows, "files": LAKE_FILES, "bytes": size}


def wait_until(
    read: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool], timeout: float
) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    while True:
        state = read()
        if done(state):
            return state, time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"still {state.get('status')} after {timeout:.0f} s")
        time.sleep(0.5)


def finished_job(http: Caller, job_id: str, auth: dict[str, str]) -> tuple[dict[str, Any], float]:
    job, seconds = wait_until(
        lambda: http.call("GET", f"/v1/jobs/{job_id}", 200, headers=auth),
        lambda j: j["status"] not in ("queued", "running"),
        timeout=900,
    )
    if job["status"] != "succeeded":
        raise RuntimeError(f"the {job.get('kind', '')} job ended {job['status']}: {job['error']}")
    return job, seconds


def register(http: Caller, admin: dict[str, str], name: str) -> tuple[dict[str, Any], float]:
    """POST /v1/datasets by reference → 202; the dataset once it left `registering`."""
    body = {
        "name": name,
        "schema": SCHEMA,
        "source": {"format": "parquet", "uri": f"file:///srv/lake/{SOURCE_FOLDER}/"},
        "privacy_unit": UNIT,
    }
    accepted = http.call("POST", "/v1/datasets", 202, json=body, headers=admin)
    if accepted.get("status") != "registering" or not accepted.get("job_id"):
        raise RuntimeError(f"registration answered {accepted}")
    dataset, seconds = wait_until(
        lambda: http.call("GET", f"/v1/datasets/{accepted['id']}", 200, headers=admin),
        lambda d: d.get("status") != "registering",
        timeout=900,
    )
    if dataset["status"] != "ready":
        raise RuntimeError(f"registration ended {dataset['status']}: {dataset.get('error')}")
    return dataset, seconds


def lake_step(
    http: Caller,
    admin: dict[str, str],
    lake: Path,
    engine: str,
    spark_cpu: Callable[[], float] | None,
    failures: list[str],
) -> dict[str, Any]:
    """Write, register, grant, measure, AIM, answer; the figures of each."""
    figures: dict[str, Any] = {"engine": engine}
    began = time.monotonic()
    figures["lake"] = write_lake(lake)
    figures["write_s"] = round(time.monotonic() - began, 1)
    cpu_before = spark_cpu() if spark_cpu else None
    dataset, seconds = register(http, admin, "visits-lake")
    figures["register_s"] = round(seconds, 1)
    if dataset.get("rows") != LAKE_ROWS:
        failures.append(f"the registered source has {dataset.get('rows')} rows, not {LAKE_ROWS}")
    tenant = http.call("POST", "/v1/tenants", 201, json={"name": "lake-check"}, headers=admin)
    auth = {"Authorization": f"Bearer {tenant['api_key']}"}
    grant = {"tenant_id": tenant["id"], "rho": 1}
    http.call("POST", f"/v1/datasets/{dataset['id']}/grants", 201, json=grant, headers=admin)
    path = f"/v1/datasets/{dataset['id']}"
    job = http.call("POST", f"{path}/measurements", 202, json=MEASURE, headers=auth)
    _, seconds = finished_job(http, job["job_id"], auth)
    figures["measure_s"] = round(seconds, 1)
    figures["marginals_measured"] = len(MEASURE["marginals"])
    job = http.call("POST", f"{path}/mechanisms/aim", 202, json=AIM, headers=auth)
    done, seconds = finished_job(http, job["job_id"], auth)
    figures["aim_s"] = round(seconds, 1)
    figures["aim_rounds"] = (done.get("progress") or {}).get("rounds_done")
    answer = http.call(
        "GET", f"{path}/marginals", 200, params={"attrs": "region,employed"}, headers=auth
    )
    if len(answer["counts"]) != 7 * 3:  # six regions and a missing one, three statuses
        failures.append(f"region × employed answered {len(answer['counts'])} cells, not 21")
    if spark_cpu is not None and cpu_before is not None:
        used = spark_cpu() - cpu_before
        figures["spark_workers_cpu_s"] = round(used, 1)
        if used < 1:
            failures.append(f"the Spark workers used {used:.1f} s of CPU: Spark counted nothing")
    figures["total_s"] = round(time.monotonic() - began, 1)
    return figures
