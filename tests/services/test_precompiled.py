"""PrecompiledSelect: one statement, no transaction round trips around it."""

from __future__ import annotations

import pytest
from sqlalchemy import func, literal_column, select
from sqlalchemy.exc import DBAPIError

from app.db import Database
from app.services.precompiled import PrecompiledSelect


def test_a_precompiled_read_sends_no_begin_and_leaves_the_connection_as_it_was(
    backend: str, database: Database
) -> None:
    """On PostgreSQL, the statement and transaction timestamps agree only for the first
    command of a transaction: with a BEGIN sent before the SELECT they would differ."""
    if backend == "postgresql":
        statement = select(func.transaction_timestamp() == func.statement_timestamp())
        assert PrecompiledSelect(statement).first(database.engine, {}) == (True,)
    else:
        assert PrecompiledSelect(select(func.sqlite_version())).first(database.engine, {})
    # the pooled connection comes back as the ORM expects it: no transaction open, and
    # on PostgreSQL out of autocommit again
    for _ in range(3):
        with database.engine.connect() as connection:
            driver = connection.connection.driver_connection
            if backend == "postgresql":
                assert driver.autocommit is False  # type: ignore[union-attr]
            else:
                assert driver.in_transaction is False  # type: ignore[union-attr]


def test_a_precompiled_read_binds_its_parameters(database: Database) -> None:
    doubled = PrecompiledSelect(select(func.abs(-2 * func.coalesce(None, 21))))
    assert doubled.first(database.engine, {}) == (42,)


def test_hot_reads_on_postgresql_skip_the_pre_ping_and_survive_a_dropped_connection(
    backend: str, database: Database
) -> None:
    """The hot-read pool sends no ping before each statement (which would double its
    round trips); a connection the server dropped is replaced and the read retried."""
    if backend != "postgresql":
        assert database.hot_read_engine is database.engine  # SQLite pings nothing
        return
    engine = database.hot_read_engine
    assert engine is not database.engine
    assert engine.pool._pre_ping is False  # type: ignore[attr-defined]
    backend_pid = PrecompiledSelect(select(func.pg_backend_pid()))
    (first_pid,) = backend_pid.first(engine, {}) or (None,)
    with database.engine.connect() as other:
        other.execute(select(func.pg_terminate_backend(first_pid)))
    # The pooled connection is dead; the read still answers, on a new connection.
    (second_pid,) = backend_pid.first(engine, {}) or (None,)
    assert second_pid is not None and second_pid != first_pid


def test_a_failing_precompiled_read_raises_sqlalchemys_error_not_the_drivers(
    backend: str, database: Database
) -> None:
    """Driver errors come out as SQLAlchemy's (the API maps OperationalError to 503),
    with the connection kept: a statement error is not a dropped connection."""
    statement = select(literal_column("1/0" if backend == "postgresql" else "no_such_fn()"))
    with pytest.raises(DBAPIError) as raised:
        PrecompiledSelect(statement).first(database.hot_read_engine, {})
    assert raised.value.connection_invalidated is False
    assert PrecompiledSelect(select(literal_column("7"))).first(database.hot_read_engine, {}) == (
        7,
    )
