"""A schema fuzz of the whole OpenAPI, as a tenant and as the admin: never a 5xx.

Schemathesis generates requests for every operation from the OpenAPI schema — its
coverage cases (each documented bound and just past it, wrong types, missing and extra
fields), then random valid and invalid ones — and none may be answered with a server
error. Half of the
requests name the real dataset and job (so they reach the services); the others keep
the generated ids. The number of examples per operation is bounded to keep the run
to about a minute for both backends. (An operation without parameters has no invalid
inputs: only its valid ones are sent.)
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from conftest import ADMIN_HEADERS, ApiHelper
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

EXAMPLES_PER_OPERATION = 10
FUZZ_SEED = 20261123


@pytest.fixture(scope="module")
def fuzz_world(client: TestClient, api: ApiHelper) -> dict[str, Any]:
    tenant, dataset = api.tenant_with_grant(1_000)
    job = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    ).json()
    return {
        "schema": schemathesis.openapi.from_asgi("/openapi.json", client.app),
        "tenant": tenant["headers"],
        "admin": ADMIN_HEADERS,
        "ids": {"dataset_id": dataset["id"], "job_id": job["job_id"]},
    }


def server_errors(world: dict[str, Any], headers: dict[str, str]) -> list[str]:
    """Every operation, valid and invalid inputs: the requests answered with a 5xx."""
    found: list[str] = []
    turn = {"n": 0}

    def call(case: Any) -> None:
        turn["n"] += 1
        if turn["n"] % 2 == 0:  # every other request names the real dataset and job
            for name, value in world["ids"].items():
                if name in (case.path_parameters or {}):
                    case.path_parameters[name] = value
        response = case.call(headers=headers)
        if response.status_code >= 500:
            found.append(f"{response.status_code}: {case.as_curl_command()}")

    schema = world["schema"]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    for operation in operations:
        # Schemathesis's coverage cases first: each bound and just past it, wrong types,
        # missing and extra fields, odd strings — then random ones, valid and not.
        for case in schema.iter_coverage_cases(
            operation,
            generation_modes=list(GenerationMode),
            generation_config=schema.config.generation_for(operation=operation),
        ):
            call(case)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run = settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            )(given(operation.as_strategy(generation_mode=mode))(call))
            run = seed(FUZZ_SEED)(run)  # random inputs, the same ones on every run
            try:
                run()
            except Unsatisfiable:
                # Nothing invalid can be said to an operation without parameters.
                assert mode is GenerationMode.NEGATIVE, operation.label
    assert turn["n"] >= len(operations) * EXAMPLES_PER_OPERATION
    return found


@pytest.mark.parametrize("who", ["tenant", "admin"])
def test_no_generated_request_gets_a_server_error(fuzz_world: dict[str, Any], who: str) -> None:
    assert server_errors(fuzz_world, fuzz_world[who]) == []
