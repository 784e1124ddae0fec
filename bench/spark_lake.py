"""The Spark engine on a lake written by `bench/lake.py generate`, beside the local engine.

For each mode (`plain`, `capped`: the unit cap of `bench/lake.py`), the 40 marginals of
`bench/lake.py scan` (every one-way and 20 pairs) are counted once by the Spark engine
through the Spark Connect server `--remote` (one Spark job) and once by the local
engine in this process; it prints one JSON line: each engine's seconds and rows per
second, and whether every count is identical.

    .venv/bin/python bench/lake.py generate --rows 10000000 --lake /tmp/lake
    PYTHONPATH=$PWD .venv/bin/python bench/spark_lake.py --lake /tmp/lake \
        --remote sc://127.0.0.1:15002

The Spark Connect server is started apart (docs: `start-connect-server.sh`), or by
`bench/lake.py spark`, which starts one (`SparkServer`: `--master local[2]` on a free
port, its logs and scratch in a temporary folder) and stops it at the end. The figures
include Spark's planning, the job and the transfer of the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lake  # bench/lake.py: the lake's layout and its 40 marginals


class SparkServer:
    """A local Spark Connect server (pyspark's `sbin/start-connect-server.sh`), as
    /work/shared/SPARK.md starts one: `--master local[2]`, the UI off, its logs, pid file,
    scratch and warehouse under `workdir`. `stop()` runs `stop-connect-server.sh`."""

    def __init__(self, workdir: Path, driver_memory: str = "2g") -> None:
        import pyspark

        self.home = Path(pyspark.__file__).resolve().parent
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.remote = f"sc://127.0.0.1:{self.port}"
        for folder in ("logs", "pids", "local", "warehouse"):
            (workdir / folder).mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOG_DIR": str(workdir / "logs"),
            "SPARK_PID_DIR": str(workdir / "pids"),
            "SPARK_LOCAL_DIRS": str(workdir / "local"),
            # Each server of its own: the daemon's instance is named after this.
            "SPARK_IDENT_STRING": f"privq-lake-{self.port}",
        }
        self.workdir = workdir
        command = [
            str(self.home / "sbin" / "start-connect-server.sh"),
            "--master", "local[2]",
            "--driver-memory", driver_memory,
            "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.connect.grpc.binding.port={self.port}",
            "--conf", f"spark.sql.warehouse.dir={workdir / 'warehouse'}",
        ]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(command, env=self.env, cwd=workdir, check=True, capture_output=True)
        self._wait_listening(timeout=300.0)
        self.start_seconds = round(time.perf_counter() - started, 1)

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(1.0)
        self.stop()
        logs = sorted((self.workdir / "logs").glob("*.out"))
        tail = logs[-1].read_text()[-2000:] if logs else ""
        raise RuntimeError(f"the Spark Connect server did not listen on {self.port}: {tail}")

    def stop(self) -> None:
        subprocess.run(
            [str(self.home / "sbin" / "stop-connect-server.sh")],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
        )


def run(lake_path: Path, remote: str, modes: list[str], local: bool) -> dict[str, Any]:
    import numpy as np

    from app.records.engine import UnitCap
    from app.records.local import LocalEngine
    from app.records.spark import SparkEngine
    from app.schema import parse_schema
    from app.sources import Source, list_files

    schema = parse_schema(json.loads((lake_path / "schema.json").read_text()))
    uri = (lake_path / lake.DATA).resolve().as_uri() + "/"
    source = Source(uri=uri, files=list_files(uri))
    marginals = lake.marginals_of(list(schema.names))
    rows = lake._source_rows(lake_path)
    with warnings.catch_warnings():  # PySpark's warning about pandas 3, which it does not use
        warnings.simplefilter("ignore")
        spark = SparkEngine(remote)
        spark.session()
    figures: dict[str, Any] = {"step": "spark", "lake": str(lake_path), "rows": rows}
    try:
        for mode in modes:
            unit = UnitCap(lake.UNIT_COLUMN, lake.UNIT_MAX_ROWS, lake.UNIT_SECRET)
            unit_or_none = unit if mode == "capped" else None
            started = time.perf_counter()
            by_spark = spark.count(source, schema, marginals, unit_or_none)
            seconds = time.perf_counter() - started
            result: dict[str, Any] = {
                "marginals": len(marginals),
                "spark_seconds": round(seconds, 2),
                "spark_rows_per_s": round(rows / seconds),
                "rows_counted": int(by_spark[marginals[0]].sum()),
            }
            if local:
                started = time.perf_counter()
                by_local = LocalEngine().count(source, schema, marginals, unit_or_none)
                seconds = time.perf_counter() - started
                result["local_seconds"] = round(seconds, 2)
                result["local_rows_per_s"] = round(rows / seconds)
                same = all(np.array_equal(by_spark[m], by_local[m]) for m in marginals)
                result["identical"] = same
            figures[mode] = result
    finally:
        # Released now, while the server is up: at exit the client would retry
        # releasing it for minutes against a server that `lake.py spark` has stopped.
        spark.session().stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lake", type=Path, default=Path("/tmp/privq-lake"))
    parser.add_argument("--remote", default="sc://127.0.0.1:15002")
    parser.add_argument("--modes", default="plain,capped", help="plain, capped or both")
    parser.add_argument("--no-local", action="store_true", help="count with Spark only")
    args = parser.parse_args()
    figures = run(args.lake, args.remote, args.modes.split(","), not args.no_local)
    figures["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    figures["build"] = lake._build()
    figures["cpus"] = os.cpu_count()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
