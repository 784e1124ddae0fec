"""End to end on the curator's machine: `privq schema draft --private-bins RHO` writes a
schema that records RHO; `privq datasets upload` with it charges RHO on the dataset's
ledger as the curator's line, and grants then share the rest of rho_total."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.cli import main
from app.config import get_settings


@pytest.fixture
def env_database(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PRIVQ_DATABASE_URL", f"sqlite:///{tmp_path}/bins.db")
    get_settings.cache_clear()
    assert main(["migrate"]) == 0
    yield
    get_settings.cache_clear()


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_private_draft_uploads_and_its_rho_is_on_the_ledger(
    env_database: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(7)
    wages = rng.lognormal(8.0, 0.8, 1500)
    csv = tmp_path / "wages.csv"
    rows = [f"{'FR' if i % 3 else 'DE'},{w:.2f},1" for i, w in enumerate(wages)]
    csv.write_text("country,wage,version\n" + "\n".join(rows) + "\n")
    assert main(["schema", "draft", str(csv), "--private-bins", "0.25", "--bins", "5"]) == 0
    out, err = capsys.readouterr()
    schema = json.loads(out)
    assert "column 'version' left out: it has the same value" in err
    assert schema["private_bins"] == {"rho": 0.25, "attributes": ["wage"]}
    schema_path = tmp_path / "schema.json"
    schema_path.write_text(out)

    # The file as it is: the upload reads only the schema's columns.
    dataset = run_json(
        capsys, "datasets", "upload", str(csv), "--schema", str(schema_path),
        "--name", "wages", "--rho-total", "1",
    )  # fmt: skip
    assert dataset["rows"] == 1500 and dataset["private_bins"]["rho"] == 0.25
    (line,) = run_json(capsys, "ledger", "--dataset", "wages")
    assert line["kind"] == "charge" and line["rho_exact"] == "0.25"
    tenant = run_json(capsys, "tenants", "create", "economists")
    capsys.readouterr()
    assert main(["grants", "create", "wages", tenant["id"], "0.8"]) == 1
    assert "at most rho=0.75 can be added" in capsys.readouterr().err
    assert run_json(capsys, "grants", "create", "wages", tenant["id"], "0.75")["rho_limit"] == 0.75
