"""`PrecompiledSelect`: one fixed SELECT compiled once per dialect and run on the
driver's cursor, for reads on the hot path of every request (see `app.services.models`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, Select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler


class PrecompiledSelect:
    """One fixed SELECT, compiled once per dialect and run on the driver's own cursor.

    For a single small read, SQLAlchemy's Session and Connection layers (begin events,
    an explicit BEGIN/ROLLBACK, result objects) cost about ten times the query itself
    on SQLite. A single statement needs no explicit transaction to be consistent: on
    SQLite (privq's connections run in autocommit, `isolation_level=None`) it reads one
    snapshot and takes no write lock; on PostgreSQL it runs in autocommit, so the
    driver sends no BEGIN before it and the pool no ROLLBACK after it.
    """

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement
        self._compiled: dict[tuple[type, str], tuple[str, SQLCompiler]] = {}

    def _for(self, engine: Engine) -> tuple[str, SQLCompiler]:
        dialect = engine.dialect
        key = (type(dialect), dialect.paramstyle)
        found = self._compiled.get(key)
        if found is None:
            compiled = self.statement.compile(dialect=dialect)
            found = self._compiled[key] = (str(compiled), compiled)
        return found

    def first(self, engine: Engine, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """The first row the statement returns with `params`, or None.

        A pooled connection the server has dropped (a restart, an idle timeout) is
        discarded and the statement run once more on a new one, so a pool without a
        pre-ping (`Database.hot_read_engine`) loses no request to a stale connection.
        """
        sql, compiled = self._for(engine)
        values = compiled.construct_params(params)
        arguments: Any = (
            tuple(values[name] for name in compiled.positiontup or ())
            if compiled.positional
            else values
        )
        try:
            return self._run(engine, sql, arguments)
        except DBAPIError as error:
            if not error.connection_invalidated:
                raise
        return self._run(engine, sql, arguments)

    @staticmethod
    def _run(engine: Engine, sql: str, arguments: Any) -> tuple[Any, ...] | None:
        try:
            connection = engine.raw_connection()
        except engine.dialect.loaded_dbapi.Error as error:
            # The server is down or refusing connections: the driver's error as SQLAlchemy
            # raises it elsewhere (an OperationalError, a 503), not a bare one (a 500).
            raise DBAPIError.instance(
                None,
                None,
                error,
                engine.dialect.loaded_dbapi.Error,
                hide_parameters=True,
                dialect=engine.dialect,
            ) from error
        try:
            driver: Any = connection.driver_connection
            # psycopg outside autocommit wraps the statement in BEGIN … ROLLBACK: two more
            # round trips (the pool rolls back on return) for a read that one statement
            # already makes consistent. (sqlite3's `autocommit`, where it exists, is never
            # False here: privq's SQLite connections manage transactions themselves.)
            switch = getattr(driver, "autocommit", None) is False
            if switch:
                driver.autocommit = True
            try:
                cursor = connection.cursor()
                try:
                    cursor.execute(sql, arguments)
                    row = cursor.fetchone()
                except engine.dialect.loaded_dbapi.Error as error:
                    # As SQLAlchemy would raise it (OperationalError is a 503), parameters
                    # hidden; a dropped connection is closed for good, not pooled again.
                    dropped = engine.dialect.is_disconnect(
                        error, connection.dbapi_connection, cursor
                    )
                    if dropped:
                        connection.invalidate(error)
                    raise DBAPIError.instance(
                        sql,
                        arguments,
                        error,
                        engine.dialect.loaded_dbapi.Error,
                        hide_parameters=True,
                        connection_invalidated=dropped,
                        dialect=engine.dialect,
                    ) from error
                finally:
                    cursor.close()
            finally:
                if switch and not driver.closed:
                    driver.autocommit = False
        finally:
            connection.close()  # back to the pool, which rolls back any transaction
        return None if row is None else tuple(row)
