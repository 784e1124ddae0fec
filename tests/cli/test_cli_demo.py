"""`privq demo` runs the whole loop: upload, grant, measure, fit, free queries, budget unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import adult_domain, adult_slice

from app.cli import main


def test_demo_runs_the_loop_on_a_slice_of_adult(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "adult.csv").write_bytes(adult_slice(2000))
    (tmp_path / "adult-domain.json").write_text(json.dumps(adult_domain()))
    assert main(["demo", "--data-dir", str(tmp_path), "--rho", "0.8"]) == 0
    out = capsys.readouterr().out
    assert '"rows": 2000' in out
    assert '"status": "succeeded"' in out
    assert "age,workclass,fnlwgt" in out  # the synthetic CSV header
    assert '"rho_spent_exact": "0.4"' in out  # half the grant, and nothing for the queries


def test_demo_without_data_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--data-dir", str(tmp_path)]) == 2
    assert "adult.csv" in capsys.readouterr().out
