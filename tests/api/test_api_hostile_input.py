"""Hostile input: every bad number, string, body or content type is a 4xx JSON error.

Each case here was a 500, a dropped connection, an `inf` in a JSON body or a silent
charge before the input was made strict (issue 10); each one also checks that
nothing was charged or stored.
"""

from __future__ import annotations

import io
import json
import logging
import math
from typing import Any

import pytest
from conftest import ADMIN_HEADERS, ApiHelper, unique_name
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.api import create_app
from app.api.guards import json_depth
from app.api.responses import SafeJSONResponse
from app.config import Settings
from app.db import Database, LedgerEntry, Tenant
from app.logs import JsonFormatter


def strict_json(response: Any) -> Any:
    """The body parsed by a JSON parser that refuses NaN and Infinity, as browsers do."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(response.text, parse_constant=refuse)


def ledger_lines(database: Database, dataset_id: str) -> int:
    with database.read_only() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(LedgerEntry)
                .where(LedgerEntry.dataset_id == dataset_id)
            )
            or 0
        )


@pytest.fixture(scope="module")
def granted(api: ApiHelper) -> dict[str, Any]:
    tenant, dataset = api.tenant_with_grant(1.0)
    return {"headers": tenant["headers"], "dataset_id": dataset["id"], "tenant": tenant}


def measure(client: TestClient, granted: dict[str, Any], body: dict[str, Any], **headers: str):
    return client.post(
        f"/v1/datasets/{granted['dataset_id']}/measurements",
        json=body,
        headers={**granted["headers"], **headers},
    )


@pytest.mark.parametrize(
    ("body", "field", "range_text"),
    [
        ({"marginals": [["sex"]], "rho": True}, "body.rho", "0 < rho ≤ 1e6"),
        ({"marginals": [["sex"]], "rho": "0.5"}, "body.rho", "0 < rho ≤ 1e6"),
        ({"marginals": [["sex"]], "sigma": 1e300}, "body.sigma", "1e-3 ≤ sigma ≤ 1e12"),
        ({"marginals": [["sex"]], "sigma": 1e-300}, "body.sigma", "1e-3 ≤ sigma ≤ 1e12"),
        ({"marginals": [["sex"]], "sigma": False}, "body.sigma", "1e-3 ≤ sigma ≤ 1e12"),
        (
            {"marginals": [["sex"]], "noise": "laplace", "scale": 1e300},
            "body.scale",
            "1e-3 ≤ scale ≤ 1e12",
        ),
        ({"marginals": [["sex"]], "epsilon": 1, "delta": 1}, "body.delta", "1e-300 ≤ delta < 1"),
        (
            {"marginals": [["sex"]], "epsilon": 1, "delta": 5e-324},
            "body.delta",
            "1e-300 ≤ delta < 1",
        ),
    ],
)
def test_numbers_are_json_numbers_within_their_documented_range(
    client: TestClient,
    database: Database,
    granted: dict[str, Any],
    body: dict[str, Any],
    field: str,
    range_text: str,
) -> None:
    response = measure(client, granted, body)
    assert response.status_code == 422, response.text
    error = strict_json(response)["error"]
    assert error["code"] == "invalid_request"
    assert [(f["field"], f["range"]) for f in error["fields"]] == [(field, range_text)]
    assert field in error["message"] and range_text in error["message"]
    assert ledger_lines(database, granted["dataset_id"]) == 0


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_json_numbers_are_refused(
    client: TestClient, database: Database, granted: dict[str, Any], token: str
) -> None:
    # Python's JSON parser accepts these tokens (and 1e400 becomes infinity).
    response = client.post(
        f"/v1/datasets/{granted['dataset_id']}/measurements",
        content=f'{{"marginals": [["sex"]], "rho": {token}}}',
        headers={**granted["headers"], "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert strict_json(response)["error"]["fields"][0]["field"] == "body.rho"
    assert ledger_lines(database, granted["dataset_id"]) == 0


def test_the_openapi_schema_documents_every_range(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    grant = schemas["GrantCreate"]["properties"]
    rho = grant["rho"]["anyOf"][0]
    assert rho["exclusiveMinimum"] == 0 and rho["maximum"] == 1e6
    measurement = schemas["MeasurementRequest"]["properties"]
    sigma = measurement["sigma"]["anyOf"][0]
    assert sigma["minimum"] == 1e-3 and sigma["maximum"] == 1e12
    scale = measurement["scale"]["anyOf"][0]
    assert scale["minimum"] == 1e-3 and scale["maximum"] == 1e12
    weights = schemas["FactoredQueryIn"]["properties"]["weights"]["additionalProperties"]
    assert weights["items"]["maximum"] == 1e12 and weights["items"]["minimum"] == -1e12
    assert "0 < rho ≤ 1e6" in rho["description"]


def test_grants_beyond_the_ledger_range_are_refused(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset()
    for rho in (9.3e6, 1e7, 1e300, 2**70):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/grants",
            json={"tenant_id": tenant["id"], "rho": rho},
            headers=ADMIN_HEADERS,
        )
        assert response.status_code == 422, (rho, response.text)
        assert strict_json(response)["error"]["fields"][0]["range"] == "0 < rho ≤ 1e6"
    listed = client.get(f"/v1/datasets/{dataset['id']}/grants", headers=ADMIN_HEADERS).json()
    assert listed == []


def test_grants_of_one_dataset_total_at_most_the_ledger_range(
    client: TestClient, api: ApiHelper
) -> None:
    dataset = api.upload_dataset()
    api.grant(dataset["id"], api.create_tenant()["id"], 1e6)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/grants",
        json={"tenant_id": api.create_tenant()["id"], "rho": 1},
        headers=ADMIN_HEADERS,
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "rho_total_exceeded"


@pytest.mark.parametrize("name", ["a\x00b", "tab\there", "bell\x07", "del\x7f"])
def test_control_characters_in_names_are_refused(
    client: TestClient, database: Database, name: str
) -> None:
    response = client.post("/v1/tenants", json={"name": name}, headers=ADMIN_HEADERS)
    assert response.status_code == 422, response.text
    assert "control characters" in response.json()["error"]["message"]
    with database.read_only() as session:
        assert name not in session.scalars(select(Tenant.name)).all()


def test_lone_surrogates_in_names_are_refused(client: TestClient) -> None:
    response = client.post(
        "/v1/tenants",
        content=b'{"name": "a\\ud800b"}',
        headers={**ADMIN_HEADERS, "Content-Type": "application/json"},
    )
    assert response.status_code == 422


@pytest.mark.parametrize(
    "path",
    [
        "/v1/datasets/a%00b",
        "/v1/datasets/a%00b/budget",
        "/v1/datasets/a%00b/model",
        "/v1/jobs/a%00b",
        "/v1/datasets/a%01b/measurements",
        "/v1/datasets/" + "x" * 65,
    ],
)
def test_control_characters_and_overlong_ids_in_paths_are_refused(
    client: TestClient, granted: dict[str, Any], path: str
) -> None:
    for headers in (ADMIN_HEADERS, granted["headers"]):
        response = client.get(path, headers=headers)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["error"]["fields"][0]["field"].startswith("path.")


def test_control_characters_in_query_parameters_and_headers_are_refused(
    client: TestClient, database: Database, granted: dict[str, Any]
) -> None:
    dataset_id = granted["dataset_id"]
    response = client.get(
        f"/v1/datasets/{dataset_id}/budget",
        params={"tenant_id": "a\x00b"},
        headers=ADMIN_HEADERS,
    )
    assert response.status_code == 422
    response = client.get(
        f"/v1/datasets/{dataset_id}/marginals", params={"attrs": "se\x00x"}, headers=ADMIN_HEADERS
    )
    assert response.status_code == 422
    response = measure(
        client, granted, {"marginals": [["sex"]], "rho": 0.01}, **{"Idempotency-Key": "key\x01"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["fields"][0]["field"] == "header.Idempotency-Key"
    response = measure(client, granted, {"marginals": [["se\x00x"]], "rho": 0.01})
    assert response.status_code == 422
    assert ledger_lines(database, dataset_id) == 0


def test_control_characters_in_an_upload_are_refused(client: TestClient, api: ApiHelper) -> None:
    for name, schema in (
        ("bad\x00name", {"sex": 2}),
        (unique_name("ds"), {"se\x00x": 2}),
        (
            unique_name("ds"),
            {"attributes": [{"name": "sex", "type": "categorical", "values": ["F\x00", "M"]}]},
        ),
        (
            unique_name("ds"),
            {"attributes": [{"name": "age", "type": "numeric", "bins": [0, 1e300]}]},
        ),
    ):
        response = client.post(
            "/v1/datasets",
            data={"schema": json.dumps(schema), "name": name},
            files={"file": ("data.csv", io.BytesIO(b"sex\n0\n1\n"), "text/csv")},
            headers=ADMIN_HEADERS,
        )
        assert response.status_code == 422, (name, schema, response.text)
    names = [d["name"] for d in client.get("/v1/datasets", headers=ADMIN_HEADERS).json()]
    assert "bad\x00name" not in names


def test_query_weights_and_labels_are_bounded(client: TestClient, granted: dict[str, Any]) -> None:
    url = f"/v1/datasets/{granted['dataset_id']}/queries"
    for query in (
        {"weights": {"sex": [1e308, 1e308]}},
        {"where": {"age": {"ge": -1e300}}},
        {"where": {"sex": [True]}},
        {"where": {"sex": ["F\x00"]}},
        {"moments": {"age": True}},
        {"moments": {"age": 9}},
    ):
        response = client.post(url, json={"queries": [query]}, headers=granted["headers"])
        assert response.status_code == 422, (query, response.text)
        strict_json(response)


def test_malformed_bodies_get_json_errors(client: TestClient, granted: dict[str, Any]) -> None:
    url = f"/v1/datasets/{granted['dataset_id']}/measurements"
    headers = granted["headers"]
    cases = [
        ("{", "application/json", 400, "invalid_json"),
        ('{"marginals": [["sex"]], "rho": 0.1', "application/json", 400, "invalid_json"),
        ("[" * 100_000 + "]" * 100_000, "application/json", 400, "json_too_deep"),
        ('{"a":' * 40 + "1" + "}" * 40, "application/json", 400, "json_too_deep"),
        ('{"marginals": [["sex"]], "rho": 0.1}', "text/plain", 415, "unsupported_media_type"),
        ('{"marginals": [["sex"]], "rho": 0.1}', "application/xml", 415, "unsupported_media_type"),
        ("", "application/json", 422, "invalid_request"),
    ]
    for body, content_type, status, code in cases:
        response = client.post(url, content=body, headers={**headers, "Content-Type": content_type})
        assert response.status_code == status, (body[:40], content_type, response.text)
        assert response.json()["error"]["code"] == code
    no_type = client.post(url, content=b'{"rho": 1}', headers=headers)
    assert no_type.status_code == 415


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    assert json_depth(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') == 1
    assert json_depth(b'{"a": "\\"[[[[[[[[[[", "b": [[1]]}') == 3
    assert json_depth(b"[]") == 1 and json_depth(b"1") == 0


def test_oversize_bodies_are_413_declared_or_streamed(
    settings: Settings, database: Database, granted: dict[str, Any]
) -> None:
    small = settings.model_copy(update={"max_json_body_bytes": 2000})
    url = f"/v1/datasets/{granted['dataset_id']}/measurements"
    big = json.dumps({"marginals": [["sex"]] * 500, "rho": 0.1}).encode()
    assert len(big) > 2000
    with TestClient(create_app(small, database=database)) as client:
        declared = client.post(
            url, content=big, headers={**granted["headers"], "Content-Type": "application/json"}
        )

        def chunks():
            for start in range(0, len(big), 500):
                yield big[start : start + 500]

        streamed = client.post(
            url,
            content=chunks(),
            headers={**granted["headers"], "Content-Type": "application/json"},
        )
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "payload_too_large"
    assert ledger_lines(database, granted["dataset_id"]) == 0


def test_oversize_uploads_are_413_while_streaming(settings: Settings, database: Database) -> None:
    small = settings.model_copy(update={"max_upload_bytes": 10_000})
    csv = b"sex\n" + b"0\n" * 2_000_000  # 4 MB: beyond the 10 kB cap plus the 1 MiB envelope

    def chunks():
        boundary = b"--privq-test-boundary"
        yield boundary + b'\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
        yield boundary + b'\r\nContent-Disposition: form-data; name="schema"\r\n\r\n{"sex": 2}\r\n'
        yield boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="a.csv"\r\n'
        yield b"Content-Type: text/csv\r\n\r\n"
        for start in range(0, len(csv), 65536):
            yield csv[start : start + 65536]
        yield b"\r\n" + boundary + b"--\r\n"

    with TestClient(create_app(small, database=database)) as client:
        response = client.post(
            "/v1/datasets",
            content=chunks(),
            headers={
                **ADMIN_HEADERS,
                "Content-Type": "multipart/form-data; boundary=privq-test-boundary",
            },
        )
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "payload_too_large"
        names = [d["name"] for d in client.get("/v1/datasets", headers=ADMIN_HEADERS).json()]
    assert "big" not in names


def test_responses_never_carry_nan_or_infinity() -> None:
    body = SafeJSONResponse({"a": math.inf, "b": [1.0, math.nan, {"c": -math.inf}], "d": 2}).body
    assert json.loads(body, parse_constant=lambda token: pytest.fail(token)) == {
        "a": None,
        "b": [1.0, None, {"c": None}],
        "d": 2,
    }


def test_database_errors_are_logged_without_the_values_they_quote(database: Database) -> None:
    """A failed statement's message names the values it was given (SQLAlchemy's
    "[parameters: …]", PostgreSQL's "Failing row contains (…)"); they can be private —
    a dataset's row count, measured counts — so neither reaches a log line."""
    secret_rows = 48_842_017
    with pytest.raises(Exception) as failed, database.unit_of_work() as session:
        session.execute(
            LedgerEntry.__table__.insert().values(
                grant_id="no-such-grant",
                tenant_id="no-such-tenant",
                dataset_id="no-such-dataset",
                rho_units=secret_rows,
                kind="not-a-kind",
            )
        )
    record = logging.LogRecord(
        "privq.api", logging.ERROR, __file__, 1, "unhandled error", (), failed._excinfo
    )
    line = JsonFormatter().format(record)
    assert "Traceback" in json.loads(line)["exc"]
    assert str(secret_rows) not in line


def test_a_subnormal_delta_cannot_make_epsilon_infinite(
    client: TestClient, granted: dict[str, Any]
) -> None:
    url = f"/v1/datasets/{granted['dataset_id']}/budget"
    refused = client.get(url, params={"delta": "5e-324"}, headers=granted["headers"])
    assert refused.status_code == 422
    assert refused.json()["error"]["fields"][0]["range"] == "1e-300 ≤ delta < 1"
    smallest = client.get(url, params={"delta": "1e-300"}, headers=granted["headers"])
    assert smallest.status_code == 200
    assert math.isfinite(strict_json(smallest)["epsilon_limit"])
