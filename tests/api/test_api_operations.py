"""Operations: health, metrics, request logs, OpenAPI examples, the generated admin key."""

from __future__ import annotations

import json
import logging

import pytest
from conftest import ADMIN_HEADERS, bearer
from fastapi.testclient import TestClient

from app.api import create_app
from app.config import Settings
from app.db import Database
from app.services import ledger
from app.services.rho import rho_units


def test_healthz_is_liveness_only(client, tmp_path) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    broken = Database(f"sqlite:///{tmp_path}/no-such-dir/privq.db")
    settings = Settings(
        database_url=broken.url, admin_key="k" * 32, workers_in_process=0, auto_migrate=False
    )
    with TestClient(create_app(settings, database=broken)) as broken_client:
        assert broken_client.get("/healthz").status_code == 200
        response = broken_client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"


def _metric(text: str, prefix: str) -> float:
    values = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    ]
    return sum(values)


def test_metrics_count_requests_by_route_template_and_committed_rho(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    client.get(f"/v1/datasets/{dataset['id']}", headers=tenant["headers"])
    before = client.get("/metrics", headers=ADMIN_HEADERS).text
    assert 'route="/v1/datasets/{dataset_id}"' in before
    assert dataset["id"] not in before  # concrete ids never become labels
    charged_before = _metric(before, "privq_rho_charged_total")

    with database.unit_of_work() as session:
        ledger.charge(
            session, tenant_id=tenant["id"], dataset_id=dataset["id"], rho_units=rho_units(0.25)
        )
    with database.session() as session:  # flushed, then rolled back: never happened
        ledger.charge(
            session, tenant_id=tenant["id"], dataset_id=dataset["id"], rho_units=rho_units(0.5)
        )
        session.rollback()
    after = client.get("/metrics", headers=ADMIN_HEADERS).text
    # The counter is a float sum over the process's earlier charges too: the difference
    # is 0.25 up to that sum's rounding.
    charged = _metric(after, "privq_rho_charged_total") - charged_before
    assert charged == pytest.approx(0.25, rel=0, abs=1e-9)
    assert "privq_http_request_duration_seconds_bucket" in after


def test_request_log_is_json_fields_without_bodies_or_queries(client, api, caplog) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    with caplog.at_level(logging.INFO, logger="privq.request"):
        client.get(
            f"/v1/datasets/{dataset['id']}/budget",
            params={"delta": 1e-5},
            headers=tenant["headers"],
        )
    records = [r for r in caplog.records if r.name == "privq.request"]
    assert records
    record = records[-1]
    assert (record.method, record.route, record.status) == (
        "GET",
        "/v1/datasets/{dataset_id}/budget",
        200,
    )
    assert record.ms >= 0
    from app.logs import JsonFormatter

    line = json.loads(JsonFormatter().format(record))
    assert line["route"] == "/v1/datasets/{dataset_id}/budget"
    assert "1e-05" not in json.dumps(line) and tenant["api_key"] not in json.dumps(line)


def test_openapi_has_docs_and_an_example_for_every_request_body(client) -> None:
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    components = spec.get("components", {}).get("schemas", {})
    bodies = 0
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody")
            if body is None:
                continue
            bodies += 1
            for media in body["content"].values():
                schema = media["schema"]
                if "$ref" in schema:
                    schema = components[schema["$ref"].rsplit("/", 1)[1]]
                has_example = "example" in media or "examples" in media or "examples" in schema
                if not has_example:
                    # multipart forms: every field except the file carries examples
                    fields = schema.get("properties", {})
                    has_example = bool(fields) and all(
                        "examples" in field
                        or field.get("format") == "binary"
                        or field.get("contentMediaType")
                        or any("examples" in alt for alt in field.get("anyOf", []))
                        or "examples" in field
                        for field in fields.values()
                    )
                assert has_example, f"{method.upper()} {path} has no request example"
    assert bodies >= 3


def test_generated_admin_key_is_printed_once_and_authenticates(tmp_path, capsys) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/fresh.db", workers_in_process=0)
    assert settings.admin_key is None and settings.effective_auto_migrate
    with TestClient(create_app(settings)) as first:
        printed = capsys.readouterr().out
        assert "admin key" in printed
        # On a line of its own, apart from the log lines (app.services.admin_key.notice).
        (admin_key,) = [line.strip() for line in printed.splitlines() if line.startswith("    ")]
        assert first.get("/v1/tenants", headers=bearer(admin_key)).status_code == 200
        assert first.get("/v1/tenants", headers=ADMIN_HEADERS).status_code == 401
    with TestClient(create_app(settings)) as second:
        assert "admin key" not in capsys.readouterr().out
        assert second.get("/v1/tenants", headers=bearer(admin_key)).status_code == 200
    assert admin_key.encode() not in (tmp_path / "fresh.db").read_bytes()
