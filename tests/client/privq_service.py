"""A real privq service for the client's tests: `privq serve` in a subprocess.

- SQLite: one `privq serve` on a free port, a database file in a temporary folder,
  migrated by the service itself, with its embedded worker.
- PostgreSQL: the schema migrated first, `privq serve` with no embedded worker, and a
  separate `privq worker` process — the scale-out layout.

Both run with a known admin key and a short worker poll, and are stopped (terminate,
then kill) when the tests are done. If the service does not come up, the error shows
the end of its log.

Also here: the table the tests upload (made from a seeded generator, not read from
anywhere) and its schema.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

STARTUP_SECONDS = 60.0
POLL_SECONDS = "0.05"


@dataclass(frozen=True)
class Service:
    url: str
    admin_key: str
    backend: str


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _privq(*args: str) -> list[str]:
    """The `privq` command of this interpreter's installation (`python -m app.cli`)."""
    return [sys.executable, "-m", "app.cli", *args]


@contextmanager
def _process(
    command: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_until_up(url: str, processes: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in processes):
            break
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs)
    raise RuntimeError(f"privq did not come up at {url}\n{tails}")


@contextmanager
def running_service(
    backend: str, database_url: str, folder: Path, admin_key: str
) -> Iterator[Service]:
    """The service on `database_url` (empty; SQLite or a PostgreSQL schema)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PRIVQ_DATABASE_URL": database_url,
        "PRIVQ_ADMIN_KEY": admin_key,
        "PRIVQ_ENV": "test",
        "PRIVQ_WORKER_POLL_SECONDS": POLL_SECONDS,
        "PRIVQ_LOG_LEVEL": "WARNING",
    }
    with ExitStack() as stack:
        serve_log, worker_log = folder / "serve.log", folder / "worker.log"
        if backend == "sqlite":
            serve = ["serve", "--port", str(port), "--workers-in-process", "1"]
            processes = [stack.enter_context(_process(_privq(*serve), env, serve_log))]
            logs = [serve_log]
        else:
            from app.migrations import upgrade_to_head

            upgrade_to_head(database_url)
            env["PRIVQ_AUTO_MIGRATE"] = "false"
            serve = ["serve", "--port", str(port), "--workers-in-process", "0"]
            processes = [
                stack.enter_context(_process(_privq(*serve), env, serve_log)),
                stack.enter_context(_process(_privq("worker"), env, worker_log)),
            ]
            logs = [serve_log, worker_log]
        _wait_until_up(url, processes, logs)
        yield Service(url=url, admin_key=admin_key, backend=backend)


# ---- the data the tests upload ------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M", "NA"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
        {"name": "grade", "type": "integer", "size": 4},
        {"name": "region", "type": "categorical", "values": ["north", "south", "east", "west"]},
    ]
}


def table(rows: int = 400, seed: int = 7) -> pd.DataFrame:
    """A seeded table in the schema's original values (`sex` includes the value "NA")."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M", "NA"], size=rows, p=[0.5, 0.45, 0.05])
    age = rng.integers(0, 100, size=rows)
    grade = np.minimum(age // 25, 3)  # grade follows age: the model has a pair to learn
    region = rng.choice(["north", "south", "east", "west"], size=rows)
    return pd.DataFrame({"sex": sex, "age": age, "grade": grade, "region": region})
