"""Threads for blocking request work: reads in the default pool, writes in a small one of their own.

Sync endpoints run in anyio's default thread pool, `api_threads` threads (set at
start-up, with a database pool of as many connections plus a few: `app.api`). A write
— a charge, a grant, an upload — waits for the database's write lock (SQLite has one
writer at a time; PostgreSQL locks the grant row), and a thread that waits holds a
token. Left in the default pool, a burst of writes would take every token and every
read would queue behind them. `@write_endpoint` runs a write in a separate pool of
`api_write_threads` threads instead: writes queue among themselves (they would have
anyway, behind the lock) while reads keep their threads. An endpoint that takes
`session: Session` gets its unit of work from the wrapper, committed when it returns.

`@read_endpoint` does the same for reads: the endpoint's `session` is a read-only one,
opened for it and closed when it returns, on the event loop for a local SQLite file
(cheaper than a thread) or in the default pool.

Either way the endpoint is written as a plain function that takes `session: Session`
and builds its response from it; the wrapper is `async`, so FastAPI serialises the
response on the event loop, after the transaction ended and its connection went back
to the pool (see `app.api.deps` for why that order matters).

`run_answer` computes a free answer too large for the event loop in a thread, at most
`api_answer_threads` of them at once (default 1). Such work is numpy calls on tables of
thousands of cells that take and drop the interpreter lock around each call: several
threads doing it at once, beside the event loop, hand the lock to each other thousands
of times a second (one context switch each). Measured with eight at once on the 2M-row
bench's 3-way marginals: 30% of the API's CPU in the kernel, against 20% with one.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from anyio import CapacityLimiter, to_thread
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.api.deps import DatabaseDep, Reads, ReadsDep, read_in_thread
from app.db import Database

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_WRITE_THREADS = 4
DEFAULT_ANSWER_THREADS = 1
# The parameter an endpoint names its session; the wrapper's own (unlikely) name.
SESSION = "session"
_DATABASE = "privq_database"

# One limiter per event loop (anyio's primitives belong to the loop that uses them).
_write_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)
_answer_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)
_write_threads = DEFAULT_WRITE_THREADS
_answer_threads = DEFAULT_ANSWER_THREADS


def configure(write_threads: int, answer_threads: int) -> None:
    """Set the write pool's and the answer pool's sizes (at start-up, before requests)."""
    global _write_threads, _answer_threads
    _write_threads = write_threads
    _answer_threads = answer_threads
    for limiter in _write_limiters.values():
        limiter.total_tokens = write_threads
    for limiter in _answer_limiters.values():
        limiter.total_tokens = answer_threads


def _limiter(
    limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CapacityLimiter], tokens: int
) -> CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = limiters.get(loop)
    if limiter is None:
        limiter = limiters[loop] = CapacityLimiter(tokens)
    return limiter


def write_limiter() -> CapacityLimiter:
    return _limiter(_write_limiters, _write_threads)


def answer_limiter() -> CapacityLimiter:
    return _limiter(_answer_limiters, _answer_threads)


async def run_answer(compute: Callable[[], R]) -> R:
    """`compute()` in a thread, at most `api_answer_threads` at once (see above)."""
    return await to_thread.run_sync(compute, limiter=answer_limiter())


def _endpoint_signature(
    function: Callable[..., Any], *, injects_session: bool, reads: bool = False
) -> inspect.Signature:
    """The endpoint's parameters, annotations resolved, all keyword-only (FastAPI passes
    keywords), without `session` and with the dependency the wrapper needs for it."""
    hints = typing.get_type_hints(function, include_extras=True)
    signature = inspect.signature(function)
    parameters = [
        parameter.replace(
            kind=inspect.Parameter.KEYWORD_ONLY,
            annotation=hints.get(parameter.name, parameter.annotation),
        )
        for parameter in signature.parameters.values()
        if not (injects_session and parameter.name == SESSION)
    ]
    if injects_session:
        parameters.append(
            inspect.Parameter(
                _DATABASE,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=ReadsDep if reads else DatabaseDep,
            )
        )
    return signature.replace(
        parameters=parameters,
        return_annotation=hints.get("return", signature.return_annotation),
    )


def _as_endpoint(function: Callable[..., Any], endpoint: Any, signature: inspect.Signature) -> Any:
    # A signature, not a `__wrapped__` link: FastAPI must see an async endpoint with
    # these parameters, whatever module the annotations were written in.
    endpoint.__signature__ = signature
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(endpoint, attribute, getattr(function, attribute))
    return endpoint


def write_endpoint(function: Callable[P, R]) -> Callable[P, R]:
    """A blocking endpoint that writes, run in the write pool instead of the default one.

    If it takes a `session` parameter, that is its unit of work: opened in the write
    thread, committed when the endpoint returns (rolled back if it raised) — before
    FastAPI serialises the response. Otherwise the endpoint opens its own.
    """
    injects_session = SESSION in inspect.signature(function).parameters

    async def endpoint(**kwargs: Any) -> Any:
        if not injects_session:
            return await to_thread.run_sync(
                functools.partial(function, **kwargs), limiter=write_limiter()
            )
        database: Database = kwargs.pop(_DATABASE)

        def in_transaction() -> Any:
            with database.unit_of_work() as session:
                call: Callable[..., R] = function
                return call(**kwargs, session=session)

        return await to_thread.run_sync(in_transaction, limiter=write_limiter())

    signature = _endpoint_signature(function, injects_session=injects_session)
    return _as_endpoint(function, endpoint, signature)  # type: ignore[no-any-return]


@overload
def read_endpoint(function: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def read_endpoint(*, on_loop: bool = True) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def read_endpoint(function: Any = None, *, on_loop: bool = True) -> Any:
    """A blocking endpoint that reads through its `session` parameter (a read-only one).

    The session is closed when the endpoint returns, before the response is serialised.
    With `on_loop` (the default, for short bounded reads) the endpoint runs on the event
    loop when the database is a local SQLite file (`app.api.deps.run_read`), else in a
    worker thread; `on_loop=False` always uses a thread (pages of up to 1000 items).
    """

    def decorate(target: Callable[..., Any]) -> Any:
        async def endpoint(**kwargs: Any) -> Any:
            reads: Reads = kwargs.pop(_DATABASE)

            def read(session: Session) -> Any:
                return target(**kwargs, session=session)

            if on_loop:
                return await reads.run(read)
            return await run_in_threadpool(read_in_thread, reads.database, read)

        signature = _endpoint_signature(target, injects_session=True, reads=True)
        return _as_endpoint(target, endpoint, signature)

    return decorate if function is None else decorate(function)
