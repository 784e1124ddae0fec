"""`privq datasets register NAME --schema FILE --uri URI`: the dataset (registering) and
its job, as `POST /v1/datasets` with a JSON body; a worker's scan makes it ready."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from source_fixtures import SCHEMA, write_lake

from app.cli import main
from app.config import get_settings
from app.db import Database
from app.worker import Worker


@pytest.fixture
def env_lake(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    lake = write_lake(tmp_path / "lake")
    monkeypatch.setenv("PRIVQ_DATABASE_URL", f"sqlite:///{tmp_path}/register.db")
    monkeypatch.setenv("PRIVQ_SOURCE_ROOTS", lake.as_uri())
    get_settings.cache_clear()
    assert main(["migrate"]) == 0
    yield lake
    get_settings.cache_clear()


def register(capsys, tmp_path: Path, uri: str, *extra: str) -> tuple[int, Any]:  # type: ignore[no-untyped-def]
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA, indent=2))
    capsys.readouterr()
    argv = ["datasets", "register", "visits", "--schema", str(schema), "--uri", uri]
    code = main([*argv, *extra, "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out) if code == 0 else out.err


def test_register_queues_the_scan_and_a_worker_makes_it_ready(env_lake, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    unit = '{"column": "person_id", "max_rows": 2}'
    code, dataset = register(
        capsys, tmp_path, f"{env_lake.as_uri()}/visits/", "--privacy-unit", unit, "--rho-total", "3"
    )
    assert code == 0, dataset
    assert dataset["status"] == "registering" and dataset["rows"] == 0
    assert dataset["source"] == {"format": "parquet", "uri": f"{env_lake.as_uri()}/visits"}
    assert dataset["privacy_unit"] == {"column": "person_id", "max_rows": 2}
    assert dataset["rho_total"] == 3.0

    settings = get_settings()
    database = Database(settings.database_url)
    try:
        assert Worker(database, settings, poll_seconds=0.01).run_until_idle() == 1
    finally:
        database.dispose()
    capsys.readouterr()
    assert main(["datasets", "show", dataset["id"], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "ready" and shown["rows"] == 600


def test_a_uri_outside_the_roots_is_a_one_line_refusal(env_lake, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, err = register(capsys, tmp_path, (tmp_path / "elsewhere").as_uri())
    assert code == 1 and "outside the allowed roots" in err
    assert len(err.strip().splitlines()) == 1
    capsys.readouterr()
    assert main(["datasets", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
