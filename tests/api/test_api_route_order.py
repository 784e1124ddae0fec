"""Routes are matched in the order they are included: the free answers' first, and
none of their patterns takes a request meant for another route."""

from __future__ import annotations

import re

from starlette.routing import Match

from app.api import discover_routers, matching_order
from app.api.routers import answers, sql


def _request_for(route) -> list[dict]:  # type: ignore[no-untyped-def]
    path = re.sub(r"\{[^}]+\}", "d-1", route.path)
    return [
        {"type": "http", "path": path, "method": method, "root_path": ""}
        for method in sorted(route.methods or {"GET"})
    ]


def test_the_free_answers_are_matched_first() -> None:
    order = matching_order(discover_routers())
    assert order[:2] == [answers.router, sql.router]
    assert {id(router) for router in order} == {id(router) for router in discover_routers()}
    assert len(order) == len(discover_routers())


def test_no_route_matched_first_takes_another_routes_request() -> None:
    order = matching_order(discover_routers())
    first = [route for router in order[:2] for route in router.routes]
    others = [route for router in order[2:] for route in router.routes if hasattr(route, "methods")]
    assert len(others) > 30
    taken = [
        (request["method"], request["path"], mine.path)
        for route in others
        for request in _request_for(route)
        for mine in first
        if mine.matches(request)[0] == Match.FULL
    ]
    assert taken == []


def test_a_route_matched_first_would_be_caught_taking_a_request() -> None:
    # The check above sees a clash: the marginals pattern takes its own requests.
    marginals = next(route for route in answers.router.routes if route.path.endswith("/marginals"))
    request = _request_for(marginals)[0]
    assert marginals.matches(request)[0] == Match.FULL
