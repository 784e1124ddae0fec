"""Jobs over the years: a filtered list, newest first; a tenant never sees another's jobs."""

from __future__ import annotations

from conftest import ADMIN_HEADERS


def measure(client, tenant, dataset, rho: str = "0.01") -> str:
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": rho},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def test_job_list_is_newest_first_filtered_and_private(client, api) -> None:
    alice, dataset = api.tenant_with_grant("1")
    bob = api.create_tenant()
    api.grant(dataset["id"], bob["id"], "1")
    other_dataset = api.upload_dataset()
    api.grant(other_dataset["id"], alice["id"], "1")

    first = measure(client, alice, dataset)
    bobs = measure(client, bob, dataset)
    second = measure(client, alice, other_dataset)

    mine = client.get("/v1/jobs", headers=alice["headers"]).json()
    assert [job["id"] for job in mine] == [second, first]  # newest first, Bob's not there
    assert all(job["tenant_id"] == alice["id"] for job in mine)
    # Filters narrow a tenant's own jobs; they never reach another tenant's.
    on_dataset = client.get(
        "/v1/jobs", params={"dataset_id": dataset["id"]}, headers=alice["headers"]
    ).json()
    assert [job["id"] for job in on_dataset] == [first]
    assert [j["id"] for j in client.get("/v1/jobs", headers=bob["headers"]).json()] == [bobs]
    assert client.get(f"/v1/jobs/{bobs}", headers=alice["headers"]).status_code == 404

    admin_view = client.get(
        "/v1/jobs", params={"dataset_id": dataset["id"]}, headers=ADMIN_HEADERS
    ).json()
    assert [job["id"] for job in admin_view] == [bobs, first]
    queued = client.get(
        "/v1/jobs", params={"status": "queued", "kind": "measure"}, headers=ADMIN_HEADERS
    ).json()
    assert {first, bobs, second} <= {job["id"] for job in queued}
    none = client.get("/v1/jobs", params={"status": "succeeded"}, headers=alice["headers"])
    assert none.json() == []


def test_job_list_refuses_bad_filters_and_anonymous_callers(client, api) -> None:
    alice, _ = api.tenant_with_grant("1")
    assert client.get("/v1/jobs").status_code == 401
    for params in ({"status": "finished"}, {"kind": "DROP TABLE"}, {"limit": 0}):
        response = client.get("/v1/jobs", params=params, headers=alice["headers"])
        assert response.status_code == 422, params
