"""Many requests in flight: no request holds a database connection while it waits for a thread.

Issue 10's stall: with more requests in flight than the thread pool has threads, each
sync endpoint held its session's connection until FastAPI had serialised its response
— in another thread-pool call — so threads waited for connections held by requests
waiting for threads, until the pool timed out (500s after 30 s). Here 200 requests
at once (reads, a write, free answers' neighbours) against an app with its own,
default-sized pool must all be answered, none with a 5xx.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
from conftest import ApiHelper

from app.api import create_app
from app.config import Settings

IN_FLIGHT = 200


async def _burst(app: Any, dataset_id: str, headers: dict[str, str]) -> Counter[int]:
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://privq") as client,
    ):

        async def one(index: int) -> int:
            kind = index % 5
            if kind == 4:
                response = await client.post(
                    f"/v1/datasets/{dataset_id}/measurements",
                    json={"marginals": [["sex"]], "rho": 0.001},
                    headers=headers,
                )
            elif kind == 3:
                response = await client.get(f"/v1/datasets/{dataset_id}/budget", headers=headers)
            elif kind == 2:
                response = await client.get("/v1/datasets", headers=headers)
            else:
                response = await client.get(f"/v1/datasets/{dataset_id}", headers=headers)
            return response.status_code

        statuses = await asyncio.wait_for(
            asyncio.gather(*(one(i) for i in range(IN_FLIGHT))), timeout=300
        )
    return Counter(statuses)


def test_two_hundred_requests_in_flight_are_all_answered(
    api: ApiHelper, settings: Settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    # The app builds its own database pool, sized as a deployment's would be.
    app = create_app(settings)
    statuses = asyncio.run(_burst(app, dataset["id"], tenant["headers"]))
    assert sum(statuses.values()) == IN_FLIGHT
    assert all(status < 500 for status in statuses), statuses
    assert statuses[202] == IN_FLIGHT // 5
