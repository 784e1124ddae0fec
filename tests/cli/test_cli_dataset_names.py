"""The operator's commands take a dataset's name wherever they take its id, if no other
dataset has that name; a shared name is refused with the ids to choose from."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import TINY_CSV, TINY_SCHEMA

from app.cli import main
from app.config import get_settings


@pytest.fixture
def env_database(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PRIVQ_DATABASE_URL", f"sqlite:///{tmp_path}/names.db")
    get_settings.cache_clear()
    assert main(["migrate"]) == 0
    yield
    get_settings.cache_clear()


def run_json(capsys, *argv: str) -> Any:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def refusal(capsys, *argv: str) -> str:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    assert main(list(argv)) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("privq: ")
    return err


def upload(capsys, tmp_path, name: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    csv, schema = tmp_path / "tiny.csv", tmp_path / "schema.json"
    csv.write_text(TINY_CSV)
    schema.write_text(json.dumps(TINY_SCHEMA))
    return run_json(  # type: ignore[no-any-return]
        capsys, "datasets", "upload", str(csv), "--schema", str(schema), "--name", name
    )


def test_a_unique_name_works_wherever_an_id_does(env_database, tmp_path, capsys) -> None:
    census = upload(capsys, tmp_path, "census")
    assert run_json(capsys, "datasets", "show", "census")["id"] == census["id"]
    assert run_json(capsys, "datasets", "show", census["id"])["id"] == census["id"]  # ids too
    tenant = run_json(capsys, "tenants", "create", "analysts")
    grant = run_json(capsys, "grants", "create", "census", tenant["id"], "0.5")
    assert grant["dataset_id"] == census["id"]
    assert [g["id"] for g in run_json(capsys, "grants", "list", "census")] == [grant["id"]]
    assert run_json(capsys, "ledger", "--dataset", "census") == []
    assert run_json(capsys, "jobs", "list", "--dataset", "census") == []
    changed = run_json(capsys, "datasets", "set-estimator", "census", "cgm-em")
    assert changed["estimator"] == "cgm-em"
    assert "not found" in refusal(capsys, "datasets", "show", "no-such-name")
    assert run_json(capsys, "jobs", "list", "--dataset", "no-such-name") == []


def test_a_shared_name_is_refused_with_the_ids(env_database, tmp_path, capsys) -> None:
    first = upload(capsys, tmp_path, "twice")
    second = upload(capsys, tmp_path, "twice")
    for argv in (
        ("datasets", "show", "twice"),
        ("grants", "list", "twice"),
        ("jobs", "list", "--dataset", "twice"),
    ):
        message = refusal(capsys, *argv)
        assert "2 datasets are named 'twice'" in message
        assert first["id"] in message and second["id"] in message
    assert run_json(capsys, "datasets", "show", second["id"])["id"] == second["id"]
    # Deleted, the other one is the only "twice" left.
    capsys.readouterr()
    assert main(["datasets", "delete", first["id"]]) == 0
    assert run_json(capsys, "datasets", "show", "twice")["id"] == second["id"]


def test_the_help_says_a_name_will_do(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["datasets", "show", "--help"])
    assert "DATASET" in capsys.readouterr().out
