"""Jobs over the years: a filtered list, newest first; a tenant never sees another's jobs."""

from __future__ import annotations

from conftest import ADMIN_HEADERS


def measure(client, tenant, dataset, rho: float = 0.01) -> str:
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": rho},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def test_job_list_is_newest_first_filtered_and_private(client, api) -> None:
    alice, dataset = api.tenant_with_grant(1)
    bob = api.create_tenant()
    api.grant(dataset["id"], bob["id"], 1)
    other_dataset = api.upload_dataset()
    api.grant(other_dataset["id"], alice["id"], 1)

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
    alice, _ = api.tenant_with_grant(1)
    assert client.get("/v1/jobs").status_code == 401
    for params in ({"status": "finished"}, {"kind": "DROP TABLE"}, {"limit": 0}):
        response = client.get("/v1/jobs", params=params, headers=alice["headers"])
        assert response.status_code == 422, params


def ledger_lines(client, dataset_id: str) -> list[tuple[str, str, str | None]]:
    lines = client.get("/v1/ledger", params={"dataset_id": dataset_id}, headers=ADMIN_HEADERS)
    return [(e["kind"], e["rho_exact"], e["job_id"]) for e in lines.json()]


def test_cancelling_a_queued_job_refunds_its_whole_charge_exactly(client, api) -> None:
    alice, dataset = api.tenant_with_grant(1)
    job_id = measure(client, alice, dataset, rho=0.333333333333)
    budget_url = f"/v1/datasets/{dataset['id']}/budget"
    assert client.get(budget_url, headers=alice["headers"]).json()["rho_remaining_exact"] == (
        "0.666666666667"
    )
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel", headers=alice["headers"])
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled" and cancelled.json()["finished_at"]
    # The charge stays; the refund is a line of its own, to the ledger unit.
    assert ledger_lines(client, dataset["id"]) == [
        ("charge", "0.333333333333", job_id),
        ("refund", "-0.333333333333", job_id),
    ]
    assert client.get(budget_url, headers=alice["headers"]).json()["rho_remaining_exact"] == "1"
    # Cancelling again changes nothing and refunds nothing more.
    again = client.post(f"/v1/jobs/{job_id}/cancel", headers=alice["headers"])
    assert again.status_code == 200 and len(ledger_lines(client, dataset["id"])) == 2
    assert client.get("/v1/jobs", params={"status": "cancelled"}, headers=alice["headers"]).json()


def test_cancel_refusals(client, api, database, settings) -> None:
    from app.worker import Worker

    alice, dataset = api.tenant_with_grant(1)
    bob = api.create_tenant()
    job_id = measure(client, alice, dataset)
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 401
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=bob["headers"]).status_code == 404
    assert client.post("/v1/jobs/no-such-job/cancel", headers=ADMIN_HEADERS).status_code == 404
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    assert client.get(f"/v1/jobs/{job_id}", headers=alice["headers"]).json()["status"] == (
        "succeeded"
    )
    finished = client.post(f"/v1/jobs/{job_id}/cancel", headers=ADMIN_HEADERS)
    assert finished.status_code == 409 and finished.json()["error"]["code"] == "job_finished"


def test_the_admin_may_cancel_any_job(client, api) -> None:
    alice, dataset = api.tenant_with_grant(1)
    job_id = measure(client, alice, dataset, rho=0.5)
    response = client.post(f"/v1/jobs/{job_id}/cancel", headers=ADMIN_HEADERS)
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert ledger_lines(client, dataset["id"])[-1] == ("refund", "-0.5", job_id)
