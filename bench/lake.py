"""A Parquet lake for datasets registered by reference, and what counting it costs.

Steps (subcommands), each printing one JSON line of figures with its command and build:

- `generate`: a lake of `--rows` rows × 20 attributes under `--lake` (never in the
  repository), in `--lake`/data: 19 columns in the files — categorical strings, numeric values with
  skewed distributions and bins, integers; missing values (nulls, NaN) in several —
  plus `year` from hive partition folders (`year=2021/` … `year=2024/`), and a unit
  column `person_id` (text ids, about 3 rows a unit, a unit's rows spread over the
  files). Files of `--file-rows` rows, written in chunks of `CHUNK_ROWS` (memory is a
  chunk, whatever the rows), and `schema.json` beside them. Attributes depend on a
  hidden class per row, so pairs are correlated as real tables are.
- `scan`: the local engine's one scan counting 40 marginals (every one-way and 20
  pairs), without and with the unit cap, each in a process of its own: seconds,
  rows per second and the process's peak resident memory (`resource.getrusage`).
- `e2e`: a real service (`privq serve` on SQLite and one `privq worker`, in a
  temporary folder; `bench/lake_service.py`) over HTTP: the lake registered by
  reference with its unit (`person_id`, k = `UNIT_MAX_ROWS`), a tenant and a grant, a
  measurement of the 40 marginals, AIM at ε = 1, δ = 10⁻⁶ over all pairs; each step's
  seconds to its end, the measurement's rows per second, the worker's peak memory.
- `spark`: a local Spark Connect server started for the run (`local[2]`, stopped at
  the end), and the 40 marginals counted by the Spark engine and the local engine,
  without and with the cap (`bench/spark_lake.py`): times, and whether every count
  is identical.

    .venv/bin/python bench/lake.py generate --rows 10000000 --lake /tmp/lake
    PYTHONPATH=$PWD .venv/bin/python bench/lake.py scan --lake /tmp/lake
    PYTHONPATH=$PWD .venv/bin/python bench/lake.py e2e --lake /tmp/lake
    PYTHONPATH=$PWD .venv/bin/python bench/lake.py spark --lake /tmp/lake

Every figure line also gives the load average (other work on the machine slows the
wall clock, not the CPU seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: lake_service, spark_lake

CHUNK_ROWS = 1_000_000
FILE_ROWS = 2_500_000
CLASSES = 8
YEARS = ("2021", "2022", "2023", "2024")
UNIT_COLUMN = "person_id"
DATA = "data"  # the source's folder in the lake; schema.json is beside it
ROWS_PER_UNIT = 3
UNIT_MAX_ROWS = 2
UNIT_SECRET = 0x5EC2E7_0F_1A4E

# (name, kind, size or bins, share of missing values); numeric values are drawn from
# skewed distributions (`_NUMERIC_DRAWS`) and binned by the edges.
CATEGORICAL = [
    ("sex", 2, 0.0),
    ("region", 9, 0.02),
    ("education", 16, 0.05),
    ("occupation", 30, 0.08),
    ("marital", 6, 0.0),
    ("language", 24, 0.10),
    ("tenure", 4, 0.03),
    ("sector", 12, 0.0),
]
NUMERIC = [
    ("income", [0, 10_000, 20_000, 40_000, 60_000, 100_000, 200_000, 1_000_000], 0.04),
    ("age", [0, 18, 25, 35, 45, 55, 65, 75, 120], 0.0),
    ("hours", [0, 10, 20, 30, 40, 50, 60, 100], 0.06),
    ("commute", [0, 5, 15, 30, 60, 120, 600], 0.12),
    ("rent", [0, 500, 1_000, 1_500, 2_500, 5_000, 20_000], 0.15),
    ("debt", [0, 1_000, 10_000, 50_000, 250_000], 0.0),
]
INTEGER = [
    ("children", 8, 0.02),
    ("rooms", 12, 0.0),
    ("cars", 5, 0.05),
    ("visits", 20, 0.0),
    ("moves", 10, 0.08),
]


def schema_json() -> dict[str, Any]:
    """The lake's schema (API.md's full form): every attribute, `year` last."""
    attributes: list[dict[str, Any]] = []
    for name, size, missing in CATEGORICAL:
        attributes.append(
            {"name": name, "type": "categorical", "values": _labels(name, size)}
            | ({"missing": True} if missing else {})
        )
    for name, edges, missing in NUMERIC:
        attributes.append(
            {"name": name, "type": "numeric", "bins": edges, "clip": name in ("income", "rent")}
            | ({"missing": True} if missing else {})
        )
    for name, size, missing in INTEGER:
        attributes.append(
            {"name": name, "type": "integer", "size": size, "clip": name == "visits"}
            | ({"missing": True} if missing else {})
        )
    attributes.append({"name": "year", "type": "categorical", "values": list(YEARS)})
    return {"attributes": attributes}


def _labels(name: str, size: int) -> list[str]:
    return [f"{name}-{i:02d}" for i in range(size)]


# -- generate -----------------------------------------------------------------------


class Generator:
    """Draws chunks of the lake's rows: per row a hidden class, then every attribute
    from a distribution that depends on the class."""

    def __init__(self, rows: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.units = max(1, rows // ROWS_PER_UNIT)
        self.class_weights = self.rng.dirichlet(np.full(CLASSES, 2.0))
        self.tables: dict[str, np.ndarray] = {}
        for name, size, _ in CATEGORICAL + INTEGER:
            # Zipf-like base weights, tilted per class: skewed and correlated.
            base = 1.0 / np.arange(1, size + 1) ** 1.1
            table = self.rng.dirichlet(base * 20, size=CLASSES)
            self.tables[name] = np.cumsum(table, axis=1)
        self.scales = {name: self.rng.uniform(0.6, 1.6, CLASSES) for name, _, _ in NUMERIC}

    def chunk(self, rows: int) -> dict[str, Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        rng = self.rng
        classes = rng.choice(CLASSES, size=rows, p=self.class_weights)
        columns: dict[str, Any] = {}
        for name, size, missing in CATEGORICAL:
            codes = self._draw(name, classes).astype(np.int32)
            mask = rng.random(rows) < missing if missing else None
            dictionary = pa.array(_labels(name, size))
            columns[name] = pa.DictionaryArray.from_arrays(pa.array(codes, mask=mask), dictionary)
        for name, edges, missing in NUMERIC:
            values = _NUMERIC_DRAWS[name](rng, rows) * self.scales[name][classes]
            high = edges[-1] * (1.5 if name in ("income", "rent") else 1)
            # Recorded as surveys record them: whole years and hours, incomes to 10.
            values = np.clip(np.round(values / _RESOLUTION[name]) * _RESOLUTION[name], 0, high)
            if missing:
                values[rng.random(rows) < missing / 2] = np.nan  # half NaN, half null
                columns[name] = pa.array(values, mask=rng.random(rows) < missing / 2)
            else:
                columns[name] = pa.array(values)
        for name, _size, missing in INTEGER:
            codes = self._draw(name, classes).astype(np.int64)
            mask = rng.random(rows) < missing if missing else None
            columns[name] = pa.array(codes, mask=mask)
        ids = pa.array(rng.integers(0, self.units, rows))
        columns[UNIT_COLUMN] = pc.binary_join_element_wise("u", pc.cast(ids, pa.string()), "")
        return columns

    def _draw(self, name: str, classes: np.ndarray) -> np.ndarray:
        cdf = self.tables[name][classes]
        u = self.rng.random(classes.size)[:, None]
        return np.minimum((u > cdf).sum(axis=1), cdf.shape[1] - 1)


_RESOLUTION = {"income": 10.0, "age": 1.0, "hours": 1.0, "commute": 1.0, "rent": 5.0, "debt": 0.01}
_NUMERIC_DRAWS = {
    "income": lambda rng, n: rng.lognormal(10.3, 0.9, n),
    "age": lambda rng, n: rng.gamma(6.0, 7.0, n),
    "hours": lambda rng, n: rng.normal(36, 12, n),
    "commute": lambda rng, n: rng.exponential(22, n),
    "rent": lambda rng, n: rng.lognormal(7.0, 0.6, n),
    "debt": lambda rng, n: rng.pareto(1.5, n) * 2_000,
}


def generate(lake: Path, rows: int, file_rows: int, seed: int) -> dict[str, Any]:
    """Write the lake: files of `file_rows` rows over the year folders, and schema.json."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lake.mkdir(parents=True, exist_ok=True)
    generator = Generator(rows, seed)
    written, files, started = 0, 0, time.perf_counter()
    while written < rows:
        year = YEARS[files % len(YEARS)]
        folder = lake / DATA / f"year={year}"
        folder.mkdir(parents=True, exist_ok=True)
        in_file = min(file_rows, rows - written)
        writer = None
        done = 0
        while done < in_file:
            size = min(CHUNK_ROWS, in_file - done)
            table = pa.table(generator.chunk(size))
            if writer is None:
                writer = pq.ParquetWriter(folder / f"part-{files:05d}.parquet", table.schema)
            writer.write_table(table, row_group_size=CHUNK_ROWS)
            done += size
        if writer is not None:
            writer.close()
        written += in_file
        files += 1
    (lake / "schema.json").write_text(json.dumps(schema_json(), indent=1))
    size = sum(p.stat().st_size for p in lake.rglob("*.parquet"))
    return {
        "step": "generate",
        "rows": rows,
        "files": files,
        "bytes": size,
        "seconds": round(time.perf_counter() - started, 1),
        "lake": str(lake),
    }


# -- scan ---------------------------------------------------------------------------


def marginals_of(names: list[str]) -> list[tuple[str, ...]]:
    """Every one-way marginal and 20 pairs (each attribute with the next, in a ring)."""
    one_way = [(name,) for name in names]
    pairs = [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))][:20]
    return one_way + pairs


def scan_once(lake: Path, capped: bool, batch_rows: int | None) -> dict[str, Any]:
    """One scan of the lake by the local engine, in this process."""
    from app.records.engine import UnitCap
    from app.records.local import BATCH_ROWS, LocalEngine
    from app.schema import parse_schema
    from app.sources import Source, list_files

    schema = parse_schema(json.loads((lake / "schema.json").read_text()))
    uri = (lake / DATA).resolve().as_uri() + "/"
    source = Source(uri=uri, files=list_files(uri))
    marginals = marginals_of(list(schema.names))
    unit = UnitCap(UNIT_COLUMN, UNIT_MAX_ROWS, UNIT_SECRET) if capped else None
    engine = LocalEngine(batch_rows=batch_rows or BATCH_ROWS)
    started, cpu = time.perf_counter(), _cpu_seconds()
    counts = engine.count(source, schema, marginals, unit)
    seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
    rows = int(counts[marginals[0]].sum())
    scanned = sum(f.size for f in source.files)
    return {
        "capped": capped,
        "marginals": len(marginals),
        "rows_counted": rows,
        "seconds": round(seconds, 2),
        # CPU seconds of all the process's threads: what the scan costs whatever else runs.
        "cpu_seconds": round(cpu, 2),
        "bytes_in_files": scanned,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def scan(lake: Path, batch_rows: int | None, modes: list[str], pool: str) -> dict[str, Any]:
    """Each mode's scan in a process of its own (so each peak memory is its own)."""
    figures: dict[str, Any] = {"step": "scan", "lake": str(lake), "arrow_pool": pool}
    source_rows = _source_rows(lake)
    figures["rows"] = source_rows
    figures["load_average_before"] = round(os.getloadavg()[0], 1)
    for mode in modes:
        command = [sys.executable, __file__, "scan-once", "--lake", str(lake), "--mode", mode]
        command += ["--arrow-pool", pool]
        if batch_rows:
            command += ["--batch-rows", str(batch_rows)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{mode} scan failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["rows_per_s"] = round(source_rows / result["seconds"])
        result["rows_per_cpu_s"] = round(source_rows / result["cpu_seconds"])
        # Other work on the machine slows the wall clock, not the CPU seconds.
        result["load_average_after"] = round(os.getloadavg()[0], 1)
        figures[mode] = result
    return figures


# -- e2e and spark ---------------------------------------------------------------------


def e2e(lake: Path, workdir: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """Registration, measurement and AIM through a real service (bench/lake_service.py)."""
    from lake_service import e2e as run_e2e

    schema = json.loads((lake / "schema.json").read_text())
    names = [attribute["name"] for attribute in schema["attributes"]]
    folder = Path(workdir or tempfile.mkdtemp(prefix="privq-lake-e2e-"))
    folder.mkdir(parents=True, exist_ok=True)
    load_before = _load()
    figures = run_e2e(
        lake,
        folder,
        rows=_source_rows(lake),
        schema=schema,
        marginals=marginals_of(names),
        unit={"column": UNIT_COLUMN, "max_rows": UNIT_MAX_ROWS},
        epsilon=args.epsilon,
        delta=args.delta,
        measure_rho=args.measure_rho,
        timeout=args.timeout,
        aim_max_model_cells=args.aim_max_model_cells,
    )
    return (
        {"step": "e2e", "lake": str(lake)}
        | figures
        | {
            "load_average_before": load_before,
            "load_average_after": _load(),
        }
    )


def spark(lake: Path, modes: list[str], driver_memory: str) -> dict[str, Any]:
    """Start a local Spark Connect server, count with both engines, stop the server."""
    from spark_lake import SparkServer, run

    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="privq-spark-") as scratch:
        server = SparkServer(Path(scratch), driver_memory=driver_memory)
        try:
            figures = run(lake, server.remote, modes, local=True)
        finally:
            server.stop()
    figures["server_start_seconds"] = server.start_seconds
    return figures | {"load_average_before": load_before, "load_average_after": _load()}


def _load() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def _source_rows(lake: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in sorted(lake.rglob("*.parquet")))


def _build() -> str:
    try:
        here = Path(__file__).resolve().parent
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True
        )
        return done.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True)
    make = steps.add_parser("generate", help="write the lake")
    make.add_argument("--lake", type=Path, default=Path("/tmp/privq-lake"))
    make.add_argument("--rows", type=int, default=10_000_000)
    make.add_argument("--file-rows", type=int, default=FILE_ROWS)
    make.add_argument("--seed", type=int, default=0)
    count = steps.add_parser("scan", help="the local engine's 40-marginal scan")
    count.add_argument("--lake", type=Path, default=Path("/tmp/privq-lake"))
    count.add_argument("--batch-rows", type=int, default=None)
    count.add_argument("--modes", default="plain,capped", help="plain, capped or both")
    count.add_argument(
        "--arrow-pool",
        default="system",
        help="Arrow's allocator in the scanning process: system (as privq's processes run), "
        "mimalloc or jemalloc",
    )
    service = steps.add_parser("e2e", help="register, measure and AIM through a service")
    service.add_argument("--lake", type=Path, default=Path("/tmp/privq-lake"))
    service.add_argument("--workdir", type=Path, default=None, help="default: a new temp folder")
    service.add_argument("--epsilon", type=float, default=1.0)
    service.add_argument("--delta", type=float, default=1e-6)
    service.add_argument("--measure-rho", type=float, default=1.0)
    service.add_argument(
        "--aim-max-model-cells", type=int, default=None, help="default: the service's cap"
    )
    service.add_argument("--timeout", type=float, default=3600.0, help="seconds a step may take")
    cluster = steps.add_parser("spark", help="the Spark engine beside the local one")
    cluster.add_argument("--lake", type=Path, default=Path("/tmp/privq-lake"))
    cluster.add_argument("--modes", default="plain,capped", help="plain, capped or both")
    cluster.add_argument("--driver-memory", default="2g")
    once = steps.add_parser("scan-once", help=argparse.SUPPRESS)
    once.add_argument("--lake", type=Path, required=True)
    once.add_argument("--mode", choices=("plain", "capped"), required=True)
    once.add_argument("--batch-rows", type=int, default=None)
    once.add_argument("--arrow-pool", default="system")
    args = parser.parse_args()
    if args.step == "scan-once":
        # As `privq worker` runs (app/cli.py), before pyarrow is imported.
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = args.arrow_pool
        print(json.dumps(scan_once(args.lake, args.mode == "capped", args.batch_rows)))
        return
    if args.step == "generate":
        figures = generate(args.lake, args.rows, args.file_rows, args.seed)
    elif args.step == "e2e":
        figures = e2e(args.lake, args.workdir, args)
    elif args.step == "spark":
        figures = spark(args.lake, args.modes.split(","), args.driver_memory)
    else:
        figures = scan(args.lake, args.batch_rows, args.modes.split(","), args.arrow_pool)
    figures["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    figures["build"] = _build()
    figures["cpus"] = os.cpu_count()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
