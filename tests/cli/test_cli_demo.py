"""`privq demo` runs the whole loop: upload, grant, measure, fit, free queries, budget unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app import census
from app.cli import main


def test_demo_runs_the_loop_on_the_example_census_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--rho", "0.8"]) == 0
    out = capsys.readouterr().out
    assert f'"rows": {census.ROWS}' in out
    assert '"status": "succeeded"' in out
    assert ",".join(census.COLUMNS) in out  # the synthetic CSV header
    assert '"rho_spent_exact": "0.4"' in out  # half the grant, and nothing for the queries
    assert "shared" not in out  # nothing read from outside the repository
    assert '{"error"' not in out  # every step answered (jobs carry "error": null)


def test_the_demo_starts_without_warnings(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "default", "-m", "app.cli", "demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
