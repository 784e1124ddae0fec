"""PrecompiledSelect: one statement, no transaction round trips around it."""

from __future__ import annotations

from sqlalchemy import func, select

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
