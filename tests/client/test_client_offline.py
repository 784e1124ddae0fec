"""The client's own logic, without a service: what a real one will not readily do on cue.

A scripted `httpx.MockTransport` plays the service: a job that stays running (the
wait's timeout), one that fails, a proxy's HTML error page, a next-page link that
repeats, a synthetic table cut short. Also the filters and marginals the client
builds, a connection nobody answers, and that importing the client imports no part
of the service.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from privq_client import AdminClient, ApiError, Client, JobFailed, JobTimeout, TransportError
from privq_client.client import marginal_lists
from privq_client.jobs import Job, progress_fraction, progress_text
from privq_client.queries import count_params, factored_query

BASE = "http://privq.test"
Handler = Callable[[httpx.Request], httpx.Response]


def scripted(handler: Handler, base: str = BASE) -> Client:
    return Client(base, "pq_test", http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def job_states(*states: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The job as successive polls see it; the last state repeats."""
    yield from states
    while True:
        yield states[-1]


def job_service(states: Iterator[dict[str, Any]]) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/datasets/d1/measurements":
            return httpx.Response(
                202, json={"job_id": "j1", "status": "queued", "rho_charged": 0.1}
            )
        assert request.url.path == "/v1/jobs/j1"
        return httpx.Response(200, json={"id": "j1", "kind": "measure", **next(states)})

    return handle


def test_wait_polls_until_the_job_succeeds_and_draws_its_stages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    states = job_states(
        {"status": "queued", "progress": {"stage": "queued"}},
        {"status": "running", "progress": {"stage": "fitting", "iteration": 40, "loss": 12.5}},
        {"status": "succeeded", "progress": {"stage": "done"}, "model_version": 3},
    )
    client = scripted(job_service(states))
    job = client.measure("d1", [["a"]], rho=0.1)
    assert job.wait(poll_interval=0.01, progress=True) is job
    assert (job.status, job.model_version) == ("succeeded", 3)
    drawn = capsys.readouterr().err
    assert "fitting · iteration 40 · loss 12.5" in drawn and "100%" in drawn


def test_wait_gives_up_after_its_timeout_and_the_job_goes_on() -> None:
    client = scripted(job_service(job_states({"status": "running", "progress": {}})))
    job = client.measure("d1", [["a"]], rho=0.1)
    with pytest.raises(JobTimeout) as timed_out:
        job.wait(timeout=0.05, poll_interval=0.01, progress=False)
    assert timed_out.value.job is job and job.status == "running"
    assert isinstance(timed_out.value, TimeoutError)


def test_a_failed_job_raises_job_failed_with_its_error() -> None:
    states = job_states({"status": "failed", "error": "the fit diverged", "progress": {}})
    job = scripted(job_service(states)).measure("d1", [["a"]], rho=0.1)
    with pytest.raises(JobFailed, match="the fit diverged") as failed:
        job.wait(progress=False)
    assert failed.value.status == "failed"
    assert job.wait(progress=False, raise_on_failure=False).error == "the fit diverged"


def test_an_error_body_becomes_api_error_with_its_details() -> None:
    body = {"error": {"code": "insufficient_budget", "message": "short", "rho_remaining": 0.25}}
    client = scripted(lambda request: httpx.Response(409, json=body))
    with pytest.raises(ApiError) as refused:
        client.budget("d1")
    error = refused.value
    assert (error.status, error.code, error.message) == (409, "insufficient_budget", "short")
    assert error.details == {"rho_remaining": 0.25} and error.rho_remaining == 0.25
    assert str(error).startswith(f"GET {BASE}/v1/datasets/d1/budget → 409 insufficient_budget")


def test_an_error_page_that_is_not_json_still_gives_api_error() -> None:
    page = "<html><body>502 Bad Gateway</body></html>"
    client = scripted(lambda request: httpx.Response(502, text=page))
    with pytest.raises(ApiError) as refused:
        client.datasets()
    assert (refused.value.status, refused.value.code) == (502, "http_502")
    assert "Bad Gateway" in refused.value.message


def test_nobody_listening_is_a_transport_error_naming_the_service() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        with Client(url, "pq_test", timeout=5) as client, pytest.raises(TransportError) as lost:
            client.datasets()
    assert url in str(lost.value) and not isinstance(lost.value, ApiError)


def test_pages_are_followed_under_a_path_prefix_never_in_a_loop_or_elsewhere() -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if "cursor" not in request.url.params:
            return httpx.Response(
                200, json=[{"id": 1}], headers={"Link": '</v1/jobs?cursor=a>; rel="next"'}
            )
        if request.url.params["cursor"] == "a":
            return httpx.Response(
                200, json=[{"id": 2}], headers={"Link": '</v1/jobs?cursor=b>; rel="next"'}
            )
        return httpx.Response(200, json=[{"id": 3}])

    assert [job["id"] for job in scripted(handle, BASE + "/privq/").jobs(page_size=1)] == [1, 2, 3]
    assert seen == [
        f"{BASE}/privq/v1/jobs?limit=1",
        f"{BASE}/privq/v1/jobs?cursor=a",
        f"{BASE}/privq/v1/jobs?cursor=b",
    ]

    def looping(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json=[{"id": 1}], headers={"Link": '</v1/jobs?cursor=a>; rel="next"'}
        )

    with pytest.raises(ApiError) as loop:
        scripted(looping).jobs()
    assert loop.value.code == "invalid_response"

    def elsewhere(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        link = '<http://other.test/v1/jobs?cursor=a>; rel="next"'
        return httpx.Response(200, json=[{"id": 1}], headers={"Link": link})

    seen.clear()
    with pytest.raises(ApiError, match="leaves the service"):
        scripted(elsewhere).jobs()
    assert seen == [f"{BASE}/v1/jobs"]  # the key never went to other.test


def test_a_synthetic_table_cut_short_is_a_transport_error() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/datasets/d1":
            return httpx.Response(200, json={"id": "d1", "attributes": []})
        return httpx.Response(200, text="a,b\n1,2\n3,4\n", headers={"X-Rows": "5"})

    with pytest.raises(TransportError, match="ended after 2 of 5 rows"):
        scripted(handle).synthetic("d1", rows=5)


def test_requests_carry_the_key_and_the_bodies_the_contract_names() -> None:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"dry_run": True})

    client = scripted(handle)
    client.mwem("d 1", epsilon=1.0, delta=1e-6, rounds=5, workload=["a"], dry_run=True)
    (request,) = sent
    assert request.headers["Authorization"] == "Bearer pq_test"
    assert request.url.raw_path == b"/v1/datasets/d%201/mechanisms/mwem?dry_run=true&delta=1e-06"
    assert json.loads(request.content) == {
        "epsilon": 1.0,
        "delta": 1e-6,
        "workload": [["a"]],
        "rounds": 5,
    }


def test_within_bin_means_are_asked_for_as_the_service_reads_them() -> None:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"dry_run": True})

    client = scripted(handle)
    client.measure_within_bin_means("d1", ["delay"], rho=0.5, dry_run=True)
    (request,) = sent
    assert request.url.raw_path == b"/v1/datasets/d1/measurements?dry_run=true"
    assert json.loads(request.content) == {
        "within_bin_means": ["delay"],
        "noise": "gaussian",
        "rho": 0.5,
    }
    with pytest.raises(TypeError):
        client.measure_within_bin_means("d1", "delay", rho=0.5)


def test_count_filters_and_factored_queries_are_built_as_the_service_reads_them() -> None:
    where = {"sex": "F", "race": {"2", "1"}, "age": {"ge": 30, "lt": 45.5}, "hours": {"lt": 40}}
    assert count_params(where) == ["sex:F", "race:1,2", "age:30..45.5", "hours:..40"]
    assert count_params({"age": ["[0, 18)", "[18, 30)"]}) == ["age:[0, 18),[18, 30)"]
    with pytest.raises(ValueError, match="comma"):
        count_params({"city": ["Washington, DC"]})
    with pytest.raises(ValueError, match="'ge' and 'lt'"):
        count_params({"age": {"gt": 3}})
    # le includes its end: the top edge of the closed last bin.
    assert count_params({"wage": {"ge": 3000, "le": 6000}}) == ["wage:3000..=6000"]
    assert count_params({"wage": {"le": 6000}}) == ["wage:..=6000"]
    assert factored_query(where={"wage": {"le": 6000}}) == {"where": {"wage": {"le": 6000.0}}}
    with pytest.raises(ValueError, match="'le'"):
        count_params({"wage": {"lt": 5, "le": 6}})
    with pytest.raises(ValueError, match="no value"):
        count_params({"sex": []})
    assert factored_query(where={"age": {"ge": 30, "lt": None}}, by={"g": {"x": [1]}}) == {
        "where": {"age": {"ge": 30.0}},
        "by": {"g": {"groups": {"x": [1]}}},
    }


def test_marginals_are_lists_of_attribute_lists() -> None:
    assert marginal_lists([["a", "b"], "c"], field="marginals") == [["a", "b"], ["c"]]
    with pytest.raises(TypeError, match="list of attribute lists"):
        marginal_lists("a", field="marginals")
    with pytest.raises(ValueError, match="http"):
        AdminClient("privq.test", "key")


def test_progress_follows_a_mechanisms_rho_and_a_fits_iterations() -> None:
    running = {
        "status": "running",
        "progress": {"stage": "round 3", "rho_used": 0.5, "rho_total": 1.0},
    }
    assert progress_fraction(running) == pytest.approx(0.45)
    assert progress_fraction({"status": "cancelled", "progress": {}}) == 1.0
    assert progress_text({"status": "running", "progress": {"stage": "measuring"}}) == "measuring"


def test_a_final_fit_fills_the_last_tenth_and_the_eta_is_shown_while_running() -> None:
    final_fit = {
        "status": "running",
        "eta_seconds": 185.0,
        "progress": {
            "stage": "final fit",
            "rho_used": 1.0,
            "rho_total": 1.0,
            "rounds_done": 12,
            "iteration": 250,
            "max_iterations": 500,
            "loss": 12.5,
        },
    }
    assert progress_fraction(final_fit) == pytest.approx(0.95)
    assert progress_text(final_fit) == (
        "final fit · 12 rounds · iteration 250 · loss 12.5 · about 3 min left"
    )
    job = Job(None, "j", info=final_fit)  # type: ignore[arg-type]
    assert job.eta_seconds == 185.0
    done = {**final_fit, "status": "succeeded", "eta_seconds": None}
    assert Job(None, "j", info=done).eta_seconds is None  # type: ignore[arg-type]


def test_importing_the_client_imports_nothing_of_the_service() -> None:
    probe = (
        "import sys, privq_client; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'app'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
