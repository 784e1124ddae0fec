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


class PausingWorker:
    """A worker, in a thread of its own, that stops after its job's second MWEM round is
    measured and waits there (its job `running`) until the test lets it go on."""

    def __init__(self, database, settings) -> None:
        import threading

        from app.worker import Worker

        self.reached, self.resume = threading.Event(), threading.Event()
        pause = self

        class Paused(Worker):
            def progress(self, job, update) -> None:
                super().progress(job, update)
                if (
                    not pause.reached.is_set()
                    and str(update.get("stage", "")).startswith("round measured")
                    and int(update.get("rounds_done", 0)) >= 2
                ):
                    pause.reached.set()
                    if not pause.resume.wait(timeout=30):
                        raise TimeoutError("the test never let the worker go on")

        self.worker = Paused(database, settings, poll_seconds=0.01)
        self.thread = threading.Thread(target=self.worker.run_once, daemon=True)

    def __enter__(self) -> PausingWorker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.resume.set()
        self.thread.join(timeout=60)


def test_cancelling_a_running_job_over_http_refunds_exactly_its_unused_rho(
    client, api, database, settings
) -> None:
    from fractions import Fraction
    from math import ceil

    from app.privacy.mechanisms.budget import exact_round_cost
    from app.services.rho import UNITS_PER_RHO, units_to_decimal_str
    from app.worker import Worker

    # The module's database is shared: jobs earlier tests left queued run first, so that
    # the paused worker's one claim is Alice's job.
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    alice, dataset = api.tenant_with_grant(1)
    bob = api.create_tenant()
    api.grant(dataset["id"], bob["id"], 1)  # Bob may use the dataset, not Alice's job
    accepted = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/mwem",
        json={"rho": 0.4, "workload": [["sex", "age"], ["sex"], ["age"]], "rounds": 6},
        headers=alice["headers"],
    )
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["job_id"]
    cancel_url = f"/v1/jobs/{job_id}/cancel"

    with PausingWorker(database, settings) as paused:
        assert paused.reached.wait(timeout=30), "the worker never reached round 2"
        assert client.post(cancel_url, headers=bob["headers"]).status_code == 404
        response = client.post(cancel_url, headers=alice["headers"])
        assert response.status_code == 200, response.text
        body = response.json()
        # Asked, not yet done: the job runs on to its next safe point.
        assert body["id"] == job_id and body["status"] == "running"
        assert body["cancel_requested_at"] and body["finished_at"] is None
        assert ledger_lines(client, dataset["id"]) == [("charge", "0.4", job_id)]
    assert not paused.thread.is_alive()

    job = client.get(f"/v1/jobs/{job_id}", headers=alice["headers"]).json()
    assert job["status"] == "cancelled" and job["finished_at"], job
    assert job["cancel_requested_at"] == body["cancel_requested_at"]
    # The rounds it drew are releases (listed, charged); the rest comes back exactly.
    measured = client.get(
        f"/v1/datasets/{dataset['id']}/measurements", headers=alice["headers"]
    ).json()
    rounds = [m for m in measured if m["job_id"] == job_id]
    assert 2 <= len(rounds) < 6
    costs = [exact_round_cost(m["sigma"], (m["details"] or {}).get("epsilon", 0.0)) for m in rounds]
    used = sum(costs, Fraction(0))
    used_units = ceil(used * UNITS_PER_RHO)
    refund = units_to_decimal_str(400_000_000_000 - used_units)
    assert ledger_lines(client, dataset["id"]) == [
        ("charge", "0.4", job_id),
        ("refund", f"-{refund}", job_id),
    ]
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=alice["headers"]).json()
    assert budget["rho_spent_exact"] == units_to_decimal_str(used_units)
    # Finished now: Bob still cannot see it; Alice's second cancel changes nothing.
    assert client.post(cancel_url, headers=bob["headers"]).status_code == 404
    again = client.post(cancel_url, headers=alice["headers"])
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    assert len(ledger_lines(client, dataset["id"])) == 2
