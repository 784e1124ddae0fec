"""Pagination of list routes: `limit` and `cursor` in, a `Link: <…>; rel="next"` header out.

Every list route stays a JSON array; the next page, if there is one, is named in the
`Link` header (RFC 8288) by the same URL with `cursor` set — filters and `limit` kept.
The last page has no `Link` header.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ParamSpec, TypeVar

from fastapi import APIRouter, Depends, Query, Request, Response

from app.api.concurrency import read_endpoint
from app.api.types import ResourceId
from app.services.pages import DEFAULT_LIMIT, MAX_LIMIT

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class PageRequest:
    """One page's `limit` and `cursor`, and where to name the next page."""

    limit: int
    cursor: str | None
    request: Request
    response: Response

    def link_next(self, next_cursor: str | None) -> None:
        """Name the next page in `Link`: this request's path and query with the new cursor."""
        if next_cursor is None:
            return
        url = self.request.url.include_query_params(cursor=next_cursor)
        target = url.path + (f"?{url.query}" if url.query else "")
        self.response.headers["Link"] = f'<{target}>; rel="next"'


def page_request(
    request: Request,
    response: Response,
    limit: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_LIMIT,
            description=f"Items per page (at most {MAX_LIMIT}).",
            examples=[DEFAULT_LIMIT],
        ),
    ] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None,
        Query(
            max_length=512,
            description='Opaque: the `cursor` of the previous page\'s `Link: <…>; rel="next"`.',
        ),
    ] = None,
) -> PageRequest:
    return PageRequest(limit=limit, cursor=cursor, request=request, response=response)


PageDep = Annotated[PageRequest, Depends(page_request)]

LINK_HEADER_DOC = {
    "Link": {
        "description": 'The next page: `<url>; rel="next"` (absent on the last page).',
        "schema": {"type": "string"},
    }
}

# The 200 response of a list route: a JSON array, and the next page in `Link`.
PAGED: dict[int | str, dict[str, Any]] = {200: {"headers": LINK_HEADER_DOC}}

# Filters the list routes share.
DatasetFilter = Annotated[ResourceId | None, Query(description="Only those of this dataset.")]
TenantFilter = Annotated[ResourceId | None, Query(description="Only those of this tenant.")]


def paged_list(
    router: APIRouter,
    item: type[Any],
    *,
    summary: str,
    path: str = "",
    responses: dict[int | str, dict[str, Any]] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`GET path` answering a page of `item`s: read in a worker thread (a page holds up to
    1000 rows), the next page in `Link` (`PageRequest.link_next`)."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        endpoint = read_endpoint(on_loop=False)(function)
        return router.get(
            path,
            response_model=list[item],  # type: ignore[valid-type]
            summary=summary,
            responses={**PAGED, **(responses or {})},
        )(endpoint)

    return decorate
