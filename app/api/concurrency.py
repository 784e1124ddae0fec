"""Threads for blocking request work: reads in the default pool, writes in a small one of their own.

Sync endpoints run in anyio's default thread pool, `api_threads` threads (set at
start-up, with a database pool of as many connections plus a few: `app.api`). A write
— a charge, a grant, an upload — waits for the database's write lock (SQLite has one
writer at a time; PostgreSQL locks the grant row), and a thread that waits holds a
token. Left in the default pool, a burst of writes would take every token and every
read would queue behind them. `@write_endpoint` runs a write in a separate pool of
`api_write_threads` threads instead: writes queue among themselves (they would have
anyway, behind the lock) while reads keep their threads.

The wrapped endpoint is `async`, so FastAPI also serialises its response on the event
loop rather than taking another thread; the endpoint's own unit of work has ended
before that (see `app.api.deps`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
import weakref
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from anyio import CapacityLimiter, to_thread

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_WRITE_THREADS = 4

# One limiter per event loop (anyio's primitives belong to the loop that uses them).
_write_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)
_write_threads = DEFAULT_WRITE_THREADS


def configure(write_threads: int) -> None:
    """Set the write pool's size (at start-up, before requests)."""
    global _write_threads
    _write_threads = write_threads
    for limiter in _write_limiters.values():
        limiter.total_tokens = write_threads


def write_limiter() -> CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _write_limiters.get(loop)
    if limiter is None:
        limiter = _write_limiters[loop] = CapacityLimiter(_write_threads)
    return limiter


def write_endpoint(function: Callable[P, R]) -> Callable[P, R]:
    """Run a blocking (sync) endpoint that writes in the write pool, not the default one.

    The wrapper carries the endpoint's signature with its annotations resolved (not a
    `__wrapped__` link), so FastAPI sees an `async` endpoint with the same parameters
    whatever module the annotations were written in.
    """

    async def endpoint(*args: P.args, **kwargs: P.kwargs) -> R:
        call = functools.partial(function, *args, **kwargs)
        return await to_thread.run_sync(call, limiter=write_limiter())

    hints = typing.get_type_hints(function, include_extras=True)
    signature = inspect.signature(function)
    endpoint.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            parameter.replace(annotation=hints.get(parameter.name, parameter.annotation))
            for parameter in signature.parameters.values()
        ],
        return_annotation=hints.get("return", signature.return_annotation),
    )
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(endpoint, attribute, getattr(function, attribute))
    return endpoint  # type: ignore[return-value]
