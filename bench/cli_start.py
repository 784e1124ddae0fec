"""Benchmark: how long `privq` takes to start — `--help`, a subcommand's `--help`, and the
import of the parser alone — each the median of `--runs` fresh processes.

`python -m app.cli` from this checkout (PYTHONPATH set to it), as a user's `privq` runs.
`python_seconds` is a bare interpreter start on the same machine, for scale: the rest is
privq's own. `parser_import_ms` is what `python -X importtime` counts for `app.cli` and
the parser it builds.

Prints one JSON line.

    .venv/bin/python bench/cli_start.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "help": ["--help"],
    "measure_help": ["measure", "--help"],
    "datasets_upload_help": ["datasets", "upload", "--help"],
    "sql_help": ["sql", "--help"],
}


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _seconds(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=_environment(), capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _parser_import_ms() -> float:
    probe = "import app.cli; app.cli.build_parser()"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        env=_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    total = 0
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if match and not match.group(2).startswith(" "):  # top-level imports only
            total += int(match.group(1))
    return total / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    figures: dict[str, object] = {
        "bench": "cli_start",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "python_seconds": round(_seconds([sys.executable, "-c", "pass"], args.runs), 3),
    }
    for name, arguments in COMMANDS.items():
        command = [sys.executable, "-m", "app.cli", *arguments]
        figures[f"{name}_seconds"] = round(_seconds(command, args.runs), 3)
    figures["parser_import_ms"] = round(_parser_import_ms(), 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
