"""The operator's commands: the admin's powers on the host, `--json` as the API, one-line errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import TINY_CSV, TINY_SCHEMA

from app.cli import main
from app.config import get_settings
from app.db import Database
from app.services import ledger
from app.services.rho import rho_units


@pytest.fixture
def env_database(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/operator.db"
    monkeypatch.setenv("PRIVQ_DATABASE_URL", url)
    get_settings.cache_clear()
    assert main(["migrate"]) == 0
    yield url
    get_settings.cache_clear()


def run_json(capsys, *argv: str) -> Any:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def refused(capsys, *argv: str) -> str:
    capsys.readouterr()
    try:
        status = main(list(argv))
    except SystemExit as exit_:  # argparse's usage errors
        status = int(exit_.code or 0)
    err = capsys.readouterr().err
    assert status in (1, 2), status
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("privq: "), err
    assert "Traceback" not in err
    return lines[0]


def test_tenants_datasets_grants_jobs_and_ledger(env_database, tmp_path, capsys) -> None:
    tenant = run_json(capsys, "tenants", "create", "analysts")
    assert tenant["name"] == "analysts" and tenant["api_key"].startswith("pq_")
    listed = run_json(capsys, "tenants", "list")
    assert [t["id"] for t in listed] == [tenant["id"]] and "api_key" not in listed[0]

    csv = tmp_path / "tiny.csv"
    csv.write_text(TINY_CSV)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(TINY_SCHEMA))
    dataset = run_json(
        capsys, "datasets", "upload", str(csv), "--schema", str(schema), "--name", "tiny",
        "--rho-total", "2",
    )  # fmt: skip
    assert (dataset["rows"], dataset["rho_total"]) == (5, 2.0)
    assert run_json(capsys, "datasets", "show", dataset["id"])["name"] == "tiny"

    grant = run_json(capsys, "grants", "create", dataset["id"], tenant["id"], "0.5")
    assert grant["rho_limit_exact"] == "0.5"
    # A limit with more digits than the ledger keeps is rounded down, as over HTTP.
    precise = run_json(capsys, "grants", "set", dataset["id"], grant["id"], "0.014973057673588523")
    assert precise["rho_limit_exact"] == "0.014973057673"
    run_json(capsys, "grants", "set", dataset["id"], grant["id"], "0.5")
    database = Database(env_database)
    try:
        with database.unit_of_work() as session:
            ledger.charge(
                session,
                tenant_id=tenant["id"],
                dataset_id=dataset["id"],
                rho_units=rho_units("0.2"),
            )
    finally:
        database.dispose()
    topped = run_json(capsys, "grants", "set", dataset["id"], grant["id"], "1.5")
    assert (topped["rho_limit_exact"], topped["rho_remaining_exact"]) == ("1.5", "1.3")
    assert "rho_below_spent" not in refused(
        capsys, "grants", "set", dataset["id"], grant["id"], "0.1"
    )
    assert "spent" in refused(capsys, "grants", "set", dataset["id"], grant["id"], "0.1")
    grants = run_json(capsys, "grants", "list", dataset["id"])
    assert [(g["id"], g["rho_spent_exact"]) for g in grants] == [(grant["id"], "0.2")]

    lines = run_json(capsys, "ledger", "--dataset", dataset["id"])
    assert [(e["kind"], e["rho_exact"]) for e in lines] == [("charge", "0.2")]
    assert run_json(capsys, "jobs", "list", "--status", "queued") == []

    # Without --json: a table for people, with the header and the row.
    capsys.readouterr()
    assert main(["grants", "list", dataset["id"]]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["id", "tenant_id", "rho_limit_exact", "rho_spent_exact",
                                "rho_remaining_exact"]  # fmt: skip
    assert table[1].split()[0] == grant["id"]


def test_errors_are_one_line(env_database, capsys) -> None:
    assert "not found" in refused(capsys, "datasets", "show", "no-such-dataset")
    assert "not found" in refused(capsys, "jobs", "show", "no-such-job")
    run_json(capsys, "tenants", "create", "twice")
    assert "already exists" in refused(capsys, "tenants", "create", "twice")
    assert "rho" in refused(capsys, "grants", "create", "d", "t", "-1")
    assert "required" in refused(capsys, "grants", "set")
    assert "invalid choice" in refused(capsys, "jobs", "list", "--status", "finished")
    assert "No such file" in refused(
        capsys, "datasets", "upload", "/no/such.csv", "--schema", "/no/such.json", "--name", "x"
    )


def test_pages_name_the_next_cursor_on_stderr(env_database, capsys) -> None:
    for name in ("a", "b", "c"):
        run_json(capsys, "tenants", "create", name)
    capsys.readouterr()
    assert main(["tenants", "list", "--limit", "2", "--json"]) == 0
    captured = capsys.readouterr()
    first = json.loads(captured.out)
    cursor = captured.err.strip().rsplit(" ", 1)[1]
    rest = run_json(capsys, "tenants", "list", "--limit", "2", "--cursor", cursor)
    assert [t["name"] for t in first + rest] == ["a", "b", "c"]


def test_an_unreachable_database_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PRIVQ_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    get_settings.cache_clear()
    try:
        message = refused(capsys, "tenants", "list")
    finally:
        get_settings.cache_clear()
    assert "database" in message


def test_lifecycle_commands(env_database, tmp_path, capsys) -> None:
    from app.db import Database
    from app.services import keys

    tenant = run_json(capsys, "tenants", "create", "rotating")
    added = run_json(capsys, "keys", "add", tenant["id"])
    assert added["api_key"].startswith("pq_") and added["id"] != tenant["key_id"]
    listed = run_json(capsys, "keys", "list", tenant["id"])
    assert [k["id"] for k in listed] == [tenant["key_id"], added["id"]]
    assert all("api_key" not in k for k in listed)
    done = run_json(capsys, "keys", "revoke", tenant["id"], tenant["key_id"])
    assert done["ok"] is True
    database = Database(env_database)
    try:
        old = keys.match_on(database.engine, keys.hash_key(tenant["api_key"]))
        new = keys.match_on(database.engine, keys.hash_key(added["api_key"]))
        assert old is not None and old.revoked and new is not None and not new.revoked
    finally:
        database.dispose()

    assert run_json(capsys, "tenants", "disable", tenant["id"])["disabled"] is True
    shown = run_json(capsys, "tenants", "show", tenant["id"])
    assert shown["disabled"] is True and len(shown["keys"]) == 2
    assert run_json(capsys, "tenants", "enable", tenant["id"])["disabled"] is False

    csv = tmp_path / "tiny.csv"
    csv.write_text(TINY_CSV)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(TINY_SCHEMA))
    dataset = run_json(
        capsys, "datasets", "upload", str(csv), "--schema", str(schema), "--name", "retire"
    )
    grant = run_json(capsys, "grants", "create", dataset["id"], tenant["id"], "1")
    assert run_json(capsys, "grants", "revoke", dataset["id"], grant["id"])["ok"] is True
    assert run_json(capsys, "grants", "list", dataset["id"])[0]["revoked_at"]
    assert run_json(capsys, "datasets", "purge-records", dataset["id"])["ok"] is True
    assert run_json(capsys, "datasets", "show", dataset["id"])["records_purged_at"]
    assert run_json(capsys, "datasets", "delete", dataset["id"])["ok"] is True
    assert "not found" in refused(capsys, "datasets", "show", dataset["id"])
    assert "not found" in refused(capsys, "jobs", "cancel", "no-such-job")


def upload_tiny(capsys, tmp_path, name: str) -> dict[str, Any]:
    csv = tmp_path / "tiny.csv"
    csv.write_text(TINY_CSV)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(TINY_SCHEMA))
    return run_json(  # type: ignore[no-any-return]
        capsys, "datasets", "upload", str(csv), "--schema", str(schema), "--name", name
    )


def test_grants_take_epsilon_and_delta_instead_of_rho(env_database, tmp_path, capsys) -> None:
    from app.services.rho import rho_units_from_epsilon, units_to_decimal_str

    tenant = run_json(capsys, "tenants", "create", "eps")
    dataset = upload_tiny(capsys, tmp_path, "eps")
    grant = run_json(
        capsys, "grants", "create", dataset["id"], tenant["id"], "--epsilon", "1", "--delta", "1e-6"
    )
    # Converted as over HTTP: the largest ρ (to the ledger unit) within ε = 1 at δ = 1e-6.
    assert grant["rho_limit_exact"] == units_to_decimal_str(rho_units_from_epsilon(1.0, 1e-6))
    assert 0.02 < float(grant["rho_limit_exact"]) < 0.03
    raised = run_json(
        capsys, "grants", "set", dataset["id"], grant["id"], "--epsilon", "3", "--delta", "1e-6"
    )
    assert raised["rho_limit_exact"] == units_to_decimal_str(rho_units_from_epsilon(3.0, 1e-6))
    assert float(raised["rho_limit_exact"]) > float(grant["rho_limit_exact"])

    set_ = ("grants", "set", dataset["id"], grant["id"])
    assert "not both" in refused(capsys, *set_, "0.5", "--epsilon", "1", "--delta", "1e-6")
    assert "give rho" in refused(capsys, *set_)
    assert "together" in refused(capsys, *set_, "--epsilon", "1")
    assert "delta" in refused(capsys, *set_, "--epsilon", "1", "--delta", "2")
    assert "invalid float" in refused(capsys, *set_, "--epsilon", "lots", "--delta", "1e-6")
    # Nothing refused changed the limit.
    listed = run_json(capsys, "grants", "list", dataset["id"])
    assert [g["rho_limit_exact"] for g in listed] == [raised["rho_limit_exact"]]


def test_datasets_set_estimator_queues_a_free_refit(env_database, tmp_path, capsys) -> None:
    from conftest import ADMIN_KEY, bearer
    from fastapi.testclient import TestClient

    from app.api import create_app
    from app.config import Settings
    from app.worker import Worker

    tenant = run_json(capsys, "tenants", "create", "refit")
    dataset = upload_tiny(capsys, tmp_path, "refit")
    assert dataset["estimator"] == "mle"
    # Nothing measured yet: the setting changes, there is nothing to refit.
    unmeasured = run_json(capsys, "datasets", "set-estimator", dataset["id"], "cgm-em")
    assert (unmeasured["estimator"], unmeasured["refit_job_id"]) == ("cgm-em", None)
    assert run_json(capsys, "datasets", "show", dataset["id"])["estimator"] == "cgm-em"

    run_json(capsys, "grants", "create", dataset["id"], tenant["id"], "1")
    settings = Settings(
        database_url=env_database, admin_key=ADMIN_KEY, workers_in_process=0, auto_migrate=False
    )
    database = Database(env_database)
    try:
        with TestClient(create_app(settings, database=database)) as client:
            measured = client.post(
                f"/v1/datasets/{dataset['id']}/measurements",
                json={"marginals": [["sex"]], "noise": "laplace", "rho": 0.25},
                headers=bearer(tenant["api_key"]),
            )
            assert measured.status_code == 202, measured.text
        assert Worker(database, settings, poll_seconds=0.01).run_until_idle() == 1
    finally:
        database.dispose()

    changed = run_json(capsys, "datasets", "set-estimator", dataset["id"], "mle")
    assert changed["estimator"] == "mle" and changed["refit_job_id"]
    job = run_json(capsys, "jobs", "show", changed["refit_job_id"])
    assert (job["kind"], job["status"], job["tenant_id"]) == ("refit", "queued", None)
    # The refit spends nothing: the ledger holds the measurement's charge only.
    lines = run_json(capsys, "ledger", "--dataset", dataset["id"])
    assert [(e["kind"], e["rho_exact"]) for e in lines] == [("charge", "0.25")]
    # The same estimator again: no second refit.
    again = run_json(capsys, "datasets", "set-estimator", dataset["id"], "mle")
    assert again["refit_job_id"] is None
    capsys.readouterr()
    assert main(["datasets", "set-estimator", dataset["id"], "cgm-em"]) == 0
    out = capsys.readouterr().out
    assert ["estimator", "cgm-em"] in [line.split() for line in out.splitlines()]
    assert "(refit job " in out and "queued" in out

    assert "invalid choice" in refused(capsys, "datasets", "set-estimator", dataset["id"], "ml")
    assert "not found" in refused(capsys, "datasets", "set-estimator", "no-such", "mle")
