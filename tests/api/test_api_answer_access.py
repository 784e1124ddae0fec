"""Free answers check the key and the dataset's latest version in one statement.

`deps.get_dataset_access` reads the key, its tenant, the grant and the latest version
together; these tests hold it to what `get_principal` and the separate version look-up
did: the same refusals in the same order, every change seen by the very next request
(here through a second app on the same database, as another replica), and a new
version answered at once. They also check that it is one statement, not two.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import ADMIN_HEADERS, bearer, unique_name
from fastapi.testclient import TestClient
from test_api_answers import SCHEMA, _csv, fit_test_model

from app.api import create_app
from app.services import access, keys
from app.services import models as model_service

FREE_ROUTES = ("model", "marginals?attrs=sex,race", "count?where=sex:F")


@pytest.fixture(scope="module")
def other_replica(settings, database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database=database)) as replica:
        yield replica


@pytest.fixture
def fitted(api, database):
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(200, seed=5), SCHEMA, name=unique_name("access"))
    api.grant(dataset["id"], tenant["id"], 1.0)
    fit_test_model(database, dataset["id"], seed=4)
    return tenant, dataset


def statuses(replica: TestClient, dataset_id: str, headers: dict[str, str]) -> set[str]:
    found = set()
    for route in FREE_ROUTES:
        response = replica.get(f"/v1/datasets/{dataset_id}/{route}", headers=headers)
        code = "ok" if response.status_code == 200 else response.json()["error"]["code"]
        found.add(f"{response.status_code} {code}")
    return found


def test_free_answers_refuse_as_before_and_see_each_change_on_the_next_request(
    client, other_replica, fitted
) -> None:
    tenant, dataset = fitted
    did, headers = dataset["id"], tenant["headers"]
    for replica in (client, other_replica):
        assert statuses(replica, did, headers) == {"200 ok"}
        assert statuses(replica, did, ADMIN_HEADERS) == {"200 ok"}
        assert statuses(replica, did, {}) == {"401 unauthorized"}
        assert statuses(replica, did, bearer("pq_not_a_key")) == {"401 unauthorized"}
        assert statuses(replica, "no-such-dataset", headers) == {"404 not_found"}

    tenants = f"/v1/tenants/{tenant['id']}"
    assert client.patch(tenants, json={"disabled": True}, headers=ADMIN_HEADERS).status_code == 200
    assert statuses(other_replica, did, headers) == {"401 tenant_disabled"}
    assert client.patch(tenants, json={"disabled": False}, headers=ADMIN_HEADERS).status_code == 200
    assert statuses(other_replica, did, headers) == {"200 ok"}

    grants = client.get(f"/v1/datasets/{did}/grants", headers=ADMIN_HEADERS).json()
    [grant] = [g for g in grants if g["tenant_id"] == tenant["id"]]
    revoked = client.delete(f"/v1/datasets/{did}/grants/{grant['id']}", headers=ADMIN_HEADERS)
    assert revoked.status_code == 204
    # Exactly as for a dataset that does not exist; the admin still sees it.
    assert statuses(other_replica, did, headers) == {"404 not_found"}
    assert statuses(other_replica, did, ADMIN_HEADERS) == {"200 ok"}

    gone = client.delete(f"{tenants}/keys/{tenant['key_id']}", headers=ADMIN_HEADERS)
    assert gone.status_code == 204
    assert statuses(other_replica, did, headers) == {"401 key_revoked"}


def test_a_new_version_is_answered_by_the_next_request(client, database, fitted) -> None:
    tenant, dataset = fitted
    url = f"/v1/datasets/{dataset['id']}/model"
    first = client.get(url, headers=tenant["headers"]).json()["version"]
    fit_test_model(database, dataset["id"], seed=9)
    assert client.get(url, headers=tenant["headers"]).json()["version"] == first + 1


def test_a_dataset_without_a_model_is_no_model(client, api) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    response = client.get(f"/v1/datasets/{dataset['id']}/model", headers=tenant["headers"])
    assert response.status_code == 404 and response.json()["error"]["code"] == "no_model"


def test_a_free_answer_reads_key_and_version_in_one_statement(client, fitted, monkeypatch) -> None:
    tenant, dataset = fitted
    calls: list[str] = []

    def spy(name, function):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(access, "key_and_version_on", spy("both", access.key_and_version_on))
    monkeypatch.setattr(keys, "match_on", spy("key", keys.match_on))
    monkeypatch.setattr(
        model_service,
        "visible_latest_version_on",
        spy("version", model_service.visible_latest_version_on),
    )
    url = f"/v1/datasets/{dataset['id']}/marginals?attrs=sex,race"
    assert client.get(url, headers=tenant["headers"]).status_code == 200
    assert calls == ["both"]
