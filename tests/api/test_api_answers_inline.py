"""Where free answers are computed: small ones on the event loop, large ones in a thread.

Either way the answer is the same; the first use of a version (loading, calibration)
and large work never run on the loop.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from conftest import unique_name
from test_api_answers import SCHEMA, _csv, fit_test_model

from app.api import answering, create_app, deps
from app.db import Database
from app.services import answers
from app.services.answers import queries as answer_queries


@pytest.fixture
def fitted(api, database):
    """A dataset of its own per test: its model's first use is this test's."""
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(400, seed=3), SCHEMA, name=unique_name("inline"))
    api.grant(dataset["id"], tenant["id"], 1.0)
    fit_test_model(database, dataset["id"], seed=2)
    return tenant, dataset


@pytest.fixture
def threads(monkeypatch) -> dict[str, set[int]]:
    """Record the thread each step of a free answer ran on."""
    seen: dict[str, set[int]] = {"loop": set(), "load": set(), "compute": set()}

    def spy(name: str, function):
        def wrapper(*args, **kwargs):
            seen[name].add(threading.get_ident())
            return function(*args, **kwargs)

        return wrapper

    # Always called on the loop: sizing the work.
    monkeypatch.setattr(answers, "marginal_size", spy("loop", answers.marginal_size))
    monkeypatch.setattr(answers, "count_size", spy("loop", answers.count_size))
    monkeypatch.setattr(answers, "prepare_queries", spy("loop", answers.prepare_queries))
    monkeypatch.setattr(answers, "load_ready_model", spy("load", answers.load_ready_model))
    monkeypatch.setattr(answers, "marginal_json", spy("compute", answers.marginal_json))
    monkeypatch.setattr(answers, "count_result", spy("compute", answers.count_result))
    monkeypatch.setattr(answers, "answer_prepared", spy("compute", answers.answer_prepared))
    # A large batch is prepared and answered together by `queries_answer`.
    monkeypatch.setattr(
        answer_queries, "answer_prepared", spy("compute", answer_queries.answer_prepared)
    )
    return seen


def _ask(client, tenant, dataset):
    base = f"/v1/datasets/{dataset['id']}"
    headers = tenant["headers"]
    marginal = client.get(base + "/marginals", params={"attrs": "race,age"}, headers=headers)
    count = client.get(base + "/count", params={"where": ["sex:F", "age:18..45"]}, headers=headers)
    queries = client.post(
        base + "/queries",
        headers=headers,
        json={
            "queries": [{"where": {"sex": ["M"]}, "by": {"race": "value"}}, {"moments": {"age": 2}}]
        },
    )
    for response in (marginal, count, queries):
        assert response.status_code == 200, response.text
    return marginal.json(), count.json(), queries.json()


@pytest.mark.parametrize("limit", ["INLINE_MAX_INTERMEDIATE_CELLS", "INLINE_MAX_WORK_CELLS"])
def test_small_answers_run_on_the_loop_and_large_ones_in_a_thread(
    client, fitted, threads, monkeypatch, backend, limit
) -> None:
    tenant, dataset = fitted
    inline = _ask(client, tenant, dataset)
    (loop_thread,) = threads["loop"]
    assert threads["compute"] == {loop_thread}
    if backend == "sqlite":
        # The version was loaded and calibrated once, in a worker thread.
        assert threads["load"] and loop_thread not in threads["load"]

    for name in ("compute", "load"):
        threads[name].clear()
    monkeypatch.setattr(answering, limit, 0)
    offloaded = _ask(client, tenant, dataset)
    assert threads["compute"] and loop_thread not in threads["compute"]
    assert offloaded == inline


def test_a_large_batch_of_queries_runs_in_a_thread(client, fitted, threads, monkeypatch) -> None:
    tenant, dataset = fitted
    _ask(client, tenant, dataset)
    (loop_thread,) = threads["loop"]
    threads["compute"].clear()
    monkeypatch.setattr(answering, "INLINE_MAX_QUERIES", 1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/queries",
        headers=tenant["headers"],
        json={"queries": [{"by": {"sex": "value"}}, {"by": {"race": "value"}}]},
    )
    assert response.status_code == 200
    assert [a["attributes"] for a in response.json()["answers"]] == [["sex"], ["race"]]
    # Prepared and answered together, off the loop.
    assert threads["compute"] and loop_thread not in threads["compute"]


def test_the_loop_reads_only_a_local_sqlite_file(tmp_path) -> None:
    on_file = Database(f"sqlite:///{tmp_path}/privq.db")
    engine = deps.make_loop_read_engine(on_file)
    assert engine is not None and str(engine.url) == on_file.url
    engine.dispose()
    on_file.dispose()
    for url in ("sqlite://", "sqlite:///:memory:", "postgresql+psycopg://u@localhost/db"):
        assert deps.make_loop_read_engine(Database(url)) is None


async def _concurrent_marginals(app, dataset_id: str, headers: dict[str, str], count: int):
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://privq") as client,
    ):
        url = f"/v1/datasets/{dataset_id}/marginals"
        return await asyncio.gather(
            *(client.get(url, params={"attrs": "race,age"}, headers=headers) for _ in range(count))
        )


@pytest.mark.parametrize("answer_threads", [1, 3])
def test_large_answers_run_in_at_most_api_answer_threads_threads(
    fitted, settings, monkeypatch, answer_threads
) -> None:
    tenant, dataset = fitted
    monkeypatch.setattr(answering, "INLINE_MAX_INTERMEDIATE_CELLS", 0)
    running = 0
    most = 0
    lock = threading.Lock()
    compute = answers.marginal_json

    def slow_compute(*args, **kwargs):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            time.sleep(0.05)  # long enough for the other requests to be waiting
            return compute(*args, **kwargs)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(answers, "marginal_json", slow_compute)
    app = create_app(settings.model_copy(update={"api_answer_threads": answer_threads}))
    responses = asyncio.run(_concurrent_marginals(app, dataset["id"], tenant["headers"], 6))
    assert [r.status_code for r in responses] == [200] * 6
    assert len({r.content for r in responses}) == 1
    assert most == answer_threads
