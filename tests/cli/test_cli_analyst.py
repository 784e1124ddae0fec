"""The analyst's commands over HTTP against a real `privq serve` (SQLite, embedded worker).

`privq measure|aim|jobs|budget|marginal|count|sql|synthetic` with `--url` and `--key`,
PRIVQ_URL and PRIVQ_KEY, or a profile file: each answer checked against the service's
own JSON for the same question, the spending commands against the tenant's budget, and
the refusals (no service, a wrong key) as one line. One run goes through the installed
`privq` in a folder with no database, from a profile only: nothing is created there.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from conftest import ADMIN_KEY, unique_name

from app.cli import main

ROOT = Path(__file__).resolve().parents[2]
GRANT_RHO = 1.0


def _privq_service() -> ModuleType:
    """tests/client/privq_service.py: how the tests start a real `privq serve`."""
    path = ROOT / "tests" / "client" / "privq_service.py"
    spec = importlib.util.spec_from_file_location("cli_analyst_privq_service", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    helpers = _privq_service()
    folder = tmp_path_factory.mktemp("analyst-cli")
    url = f"sqlite:///{folder / 'privq.db'}"
    with helpers.running_service("sqlite", url, folder, ADMIN_KEY) as running:
        yield running


@pytest.fixture(scope="module")
def setup(service: Any) -> dict[str, Any]:
    """A tenant with a grant of ρ = 1 on a small uploaded table; its key and dataset."""
    helpers = sys.modules["cli_analyst_privq_service"]
    admin = {"Authorization": f"Bearer {service.admin_key}"}
    with httpx.Client(base_url=service.url, headers=admin, timeout=60) as http:
        tenant = http.post("/v1/tenants", json={"name": unique_name("cli-analyst")}).json()
        name = unique_name("cli-people")
        data = helpers.table(rows=300).to_csv(index=False).encode()
        uploaded = http.post(
            "/v1/datasets",
            data={"name": name, "rho_total": "2"},
            files={
                "schema": ("schema.json", json.dumps(helpers.SCHEMA), "application/json"),
                "file": ("people.csv", data, "text/csv"),
            },
        )
        assert uploaded.status_code == 201, uploaded.text
        dataset = uploaded.json()
        granted = http.post(
            f"/v1/datasets/{dataset['id']}/grants",
            json={"tenant_id": tenant["id"], "rho": GRANT_RHO},
        )
        assert granted.status_code == 201, granted.text
    return {"key": tenant["api_key"], "dataset_id": dataset["id"], "name": name}


@pytest.fixture(scope="module")
def raw(service: Any, setup: dict[str, Any]) -> Iterator[httpx.Client]:
    """Plain HTTP with the tenant's key: the service's own JSON to compare with."""
    headers = {"Authorization": f"Bearer {setup['key']}"}
    with httpx.Client(base_url=service.url, headers=headers, timeout=60) as client:
        yield client


def privq(
    capsys: pytest.CaptureFixture[str], service: Any, key: str, *args: str
) -> tuple[int, str, str]:
    status = main([*args, "--url", service.url, "--key", key])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def measured(service: Any, setup: dict[str, Any]) -> int:
    """`privq measure … --wait --json` on the dataset's name, until its job succeeded."""
    status = main(
        [
            "measure",
            setup["name"],
            "sex",
            "age,sex",
            "grade",
            "region",
            "--rho",
            "0.2",
            "--wait",
            "--json",
            "--url",
            service.url,
            "--key",
            setup["key"],
        ]
    )
    assert status == 0
    return status


def test_a_dry_run_says_the_cost_and_charges_nothing(
    capsys: pytest.CaptureFixture[str], service: Any, setup: dict[str, Any], raw: httpx.Client
) -> None:
    path = f"/v1/datasets/{setup['dataset_id']}/budget"
    before = raw.get(path).json()["rho_spent_exact"]
    status, out, _ = privq(
        capsys, service, setup["key"], "measure", setup["dataset_id"], "sex", "--rho", "0.1",
        "--dry-run", "--json",
    )  # fmt: skip
    assert status == 0
    assert json.loads(out)["rho"] == pytest.approx(0.1)
    status, out, _ = privq(
        capsys, service, setup["key"], "aim", setup["dataset_id"], "--rho", "0.3", "--dry-run"
    )
    assert status == 0 and "nothing was charged" in out
    assert raw.get(path).json()["rho_spent_exact"] == before


def test_within_bin_means_are_priced_by_the_cli_as_by_the_service(
    capsys: pytest.CaptureFixture[str], service: Any, setup: dict[str, Any], raw: httpx.Client
) -> None:
    path = f"/v1/datasets/{setup['dataset_id']}/measurements"
    expected = raw.post(
        path, params={"dry_run": "true"}, json={"within_bin_means": ["age"], "rho": 0.1}
    ).json()
    status, out, _ = privq(
        capsys, service, setup["key"], "measure", setup["dataset_id"],
        "--within-bin-means", "age", "--rho", "0.1", "--dry-run", "--json",
    )  # fmt: skip
    assert status == 0
    assert json.loads(out) == expected
    assert expected["within_bin_means"]
    status, _, err = privq(
        capsys, service, setup["key"], "measure", setup["dataset_id"], "age",
        "--within-bin-means", "age", "--rho", "0.1",
    )  # fmt: skip
    assert status != 0 and "not both" in err
    status, _, err = privq(capsys, service, setup["key"], "measure", setup["dataset_id"])
    assert status != 0 and "MARGINAL" in err


def test_measure_waits_for_its_job_and_the_budget_shows_the_charge(
    capsys: pytest.CaptureFixture[str],
    service: Any,
    setup: dict[str, Any],
    raw: httpx.Client,
    measured: int,
) -> None:
    capsys.readouterr()
    status, out, _ = privq(capsys, service, setup["key"], "budget", setup["name"], "--json")
    assert status == 0
    budget = json.loads(out)
    assert budget == raw.get(f"/v1/datasets/{setup['dataset_id']}/budget").json()
    assert budget["rho_spent"] == pytest.approx(0.2)
    status, out, _ = privq(capsys, service, setup["key"], "budget", setup["name"])
    assert status == 0 and "rho_remaining" in out and "0.8" in out


def test_jobs_list_and_show_are_the_tenants_own(
    capsys: pytest.CaptureFixture[str],
    service: Any,
    setup: dict[str, Any],
    raw: httpx.Client,
    measured: int,
) -> None:
    status, out, _ = privq(capsys, service, setup["key"], "jobs", "list", "--json")
    assert status == 0
    listed = json.loads(out)
    assert listed == raw.get("/v1/jobs").json() and listed
    job_id = listed[-1]["id"]
    status, out, _ = privq(capsys, service, setup["key"], "jobs", "list")
    assert status == 0 and out.splitlines()[0].split()[:3] == ["id", "kind", "status"]
    assert job_id in out
    status, out, _ = privq(capsys, service, setup["key"], "jobs", "show", job_id, "--json")
    assert status == 0 and json.loads(out)["status"] == "succeeded"


def test_marginal_in_every_format_is_the_services_answer(
    capsys: pytest.CaptureFixture[str],
    service: Any,
    setup: dict[str, Any],
    raw: httpx.Client,
    measured: int,
) -> None:
    expected = raw.get(
        f"/v1/datasets/{setup['dataset_id']}/marginals", params={"attrs": "age,sex"}
    ).json()
    key, name = setup["key"], setup["name"]
    status, out, _ = privq(capsys, service, key, "marginal", name, "age", "sex", "--json")
    assert status == 0 and json.loads(out) == expected
    status, out, _ = privq(capsys, service, key, "marginal", name, "age,sex", "--csv")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["age", "sex", "count"]
    assert [float(row[2]) for row in rows[1:]] == pytest.approx(expected["counts"])
    status, out, _ = privq(capsys, service, setup["key"], "marginal", setup["name"], "sex")
    lines = out.splitlines()
    assert status == 0 and lines[0].split() == ["sex", "count"]
    assert f"model version {expected['model_version']}" in lines[-1]


def test_count_sql_and_synthetic_answer_from_the_model(
    capsys: pytest.CaptureFixture[str],
    service: Any,
    setup: dict[str, Any],
    raw: httpx.Client,
    measured: int,
) -> None:
    base = f"/v1/datasets/{setup['dataset_id']}"
    expected = raw.get(f"{base}/count", params={"where": ["sex:F", "age:30..45"]}).json()
    status, out, _ = privq(
        capsys, service, setup["key"], "count", setup["name"], "--where", "sex:F",
        "--where", "age:30..45", "--json",
    )  # fmt: skip
    assert status == 0 and json.loads(out) == expected

    query = f'SELECT sex, COUNT(*) AS n FROM "{setup["name"]}" GROUP BY sex'
    answered = raw.post(f"{base}/sql", json={"query": query})
    assert answered.status_code == 200, answered.text
    expected_sql = answered.json()
    status, out, _ = privq(capsys, service, setup["key"], "sql", setup["name"], query, "--json")
    assert status == 0 and json.loads(out) == expected_sql
    status, out, _ = privq(capsys, service, setup["key"], "sql", setup["name"], query, "--csv")
    assert status == 0 and out.splitlines()[0].split(",")[:2] == ["sex", "n"]
    status, out, _ = privq(capsys, service, setup["key"], "sql", setup["name"], query)
    assert status == 0 and "model version" in out.splitlines()[-1]

    status, out, _ = privq(
        capsys, service, setup["key"], "synthetic", setup["name"], "--rows", "25", "--seed", "3"
    )
    records = list(csv.reader(io.StringIO(out)))
    assert status == 0 and records[0] == ["sex", "age", "grade", "region"]
    assert len(records) == 26


def test_refusals_are_one_line(
    capsys: pytest.CaptureFixture[str],
    service: Any,
    setup: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    status, _, err = privq(capsys, service, "not-a-key", "budget", setup["dataset_id"])
    assert status == 1 and err.count("\n") == 1 and "HTTP 401" in err
    status, _, err = privq(
        capsys, service, setup["key"], "measure", setup["dataset_id"], "sex", "--rho", "5"
    )
    assert status == 1 and "HTTP 409" in err and "Traceback" not in err
    # No URL anywhere: the HTTP-only commands say what to give.
    for variable in ("PRIVQ_URL", "PRIVQ_KEY", "PRIVQ_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["marginal", setup["dataset_id"], "sex"]) == 1
    assert "--url" in capsys.readouterr().err
    # A URL without a key.
    assert main(["count", setup["dataset_id"], "--url", service.url]) == 1
    assert "no API key" in capsys.readouterr().err


def test_a_profile_is_enough_and_no_database_is_created(
    service: Any, setup: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "config"
    (config / "privq").mkdir(parents=True)
    (config / "privq" / "profile.toml").write_text(
        f'url = "{service.url}"\nkey = "{setup["key"]}"\n', encoding="utf-8"
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVQ_") or k == "PRIVQ_ENV"}
    env["XDG_CONFIG_HOME"] = str(config)
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "jobs", "list", "--json"],
        cwd=work,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), list)
    assert list(work.iterdir()) == []  # no privq.db, nothing else


def test_datasets_list_and_show_are_the_tenants_own(
    capsys: pytest.CaptureFixture[str], service: Any, setup: dict[str, Any], raw: httpx.Client
) -> None:
    status, out, _ = privq(capsys, service, setup["key"], "datasets", "list", "--json")
    assert status == 0 and json.loads(out) == raw.get("/v1/datasets").json()
    assert [d["id"] for d in json.loads(out)] == [setup["dataset_id"]]
    status, out, _ = privq(capsys, service, setup["key"], "datasets", "show", setup["name"])
    assert status == 0 and "attributes:" in out and "region" in out
    status, out, _ = privq(
        capsys, service, setup["key"], "datasets", "show", setup["dataset_id"], "--json"
    )
    shown = json.loads(out)
    assert shown == raw.get(f"/v1/datasets/{setup['dataset_id']}").json()
    assert shown.get("rows") is None  # the row count is the admin's alone


def test_quantiles_in_every_format_are_the_services_answer(
    capsys: pytest.CaptureFixture[str],
    service: Any,
    setup: dict[str, Any],
    raw: httpx.Client,
    measured: int,
) -> None:
    path = f"/v1/datasets/{setup['dataset_id']}/quantiles"
    expected = raw.get(path, params={"attr": "age", "p": "0.5,0.9"}).json()
    key, name = setup["key"], setup["name"]
    status, out, _ = privq(
        capsys, service, key, "quantiles", name, "age", "--p", "0.5,0.9", "--json"
    )
    assert status == 0 and json.loads(out) == expected
    status, out, _ = privq(
        capsys, service, key, "quantiles", name, "age", "--p", "0.5,0.9", "--csv"
    )
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["p", "value", "bin"] and [r[0] for r in rows[1:3]] == ["0.5", "0.9"]
    assert float(rows[1][1]) == pytest.approx(expected["quantiles"][0]["value"])
    status, out, _ = privq(capsys, service, key, "quantiles", name, "age")
    lines = out.splitlines()
    assert status == 0 and lines[0].split() == ["p", "value", "bin"]
    assert f"model version {expected['model_version']}" in lines[-1]
    assert privq(capsys, service, key, "quantiles", name, "sex")[0] == 1
