"""`privq datasets upload --privacy-unit JSON`: the operator's upload truncates to k rows
per unit and stores no id, as the API's `privacy_unit` field does."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from app.cli import main
from app.config import get_settings

SCHEMA = {"attributes": [{"name": "sex", "type": "categorical", "values": ["F", "M"]}]}
IDS = ["zz-person-a"] * 5 + ["zz-person-b"] * 3 + ["zz-person-c"]


@pytest.fixture
def env_database(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PRIVQ_DATABASE_URL", f"sqlite:///{tmp_path}/units.db")
    get_settings.cache_clear()
    assert main(["migrate"]) == 0
    yield tmp_path / "units.db"
    get_settings.cache_clear()


def upload(capsys, tmp_path, *extra: str) -> tuple[int, Any]:  # type: ignore[no-untyped-def]
    csv, schema = tmp_path / "visits.csv", tmp_path / "schema.json"
    csv.write_text("sex,pid\n" + "".join(f"{'FM'[i % 2]},{p}\n" for i, p in enumerate(IDS)))
    schema.write_text(json.dumps(SCHEMA))
    capsys.readouterr()
    argv = ["datasets", "upload", str(csv), "--schema", str(schema), "--name", "visits"]
    code = main([*argv, *extra, "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out) if code == 0 else out.err


def test_the_upload_keeps_at_most_k_rows_per_unit(env_database, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, dataset = upload(capsys, tmp_path, "--privacy-unit", '{"column": "pid", "max_rows": 2}')
    assert code == 0
    assert dataset["rows"] == 2 + 2 + 1
    assert dataset["privacy_unit"] == {"column": "pid", "max_rows": 2}
    dump = "\n".join(sqlite3.connect(env_database).iterdump())
    assert "zz-person" not in dump


def test_a_bad_privacy_unit_is_a_one_line_refusal(env_database, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, err = upload(capsys, tmp_path, "--privacy-unit", '{"column": "pid", "max_rows": 0}')
    assert code == 1 and "max_rows must be 1 to" in err and len(err.strip().splitlines()) == 1
