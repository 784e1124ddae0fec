"""The database connection: an engine configured for privq and its session factories.

`app.db` holds the tables and re-exports these names, so `from app.db import Database`
keeps working.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

# An execution option: the BEGIN mode of a SQLite transaction ("IMMEDIATE" by default).
SQLITE_BEGIN_OPTION = "privq_sqlite_begin"


def is_sqlite_url(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(
    url: str, *, sqlite_busy_timeout_seconds: float = 30.0, **engine_kwargs: Any
) -> Engine:
    """An engine configured for privq: SQLite in WAL mode with IMMEDIATE transactions.

    Statement parameters are hidden from logs and exception messages: they can hold
    private values (a dataset's row count, measured counts).
    """
    engine_kwargs.setdefault("hide_parameters", True)
    if not is_sqlite_url(url):
        engine_kwargs.setdefault("pool_pre_ping", True)
        return create_engine(url, **engine_kwargs)

    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": sqlite_busy_timeout_seconds},
        **engine_kwargs,
    )
    busy_timeout_ms = int(sqlite_busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
        # Hand transaction control to the "begin" hook below (pysqlite would
        # otherwise issue a DEFERRED BEGIN itself, lazily, before DML only).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # Deleted rows are overwritten with zeros, not left in free space: a purge must
        # not leave raw records in the file (`app.services.scrub` empties the WAL after).
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        mode = connection.get_execution_options().get(SQLITE_BEGIN_OPTION, "IMMEDIATE")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


class Database:
    """One engine and its session factories; create one per process (or per test)."""

    def __init__(
        self, url: str, *, sqlite_busy_timeout_seconds: float = 30.0, **engine_kwargs: Any
    ) -> None:
        self.url = url
        self.is_sqlite = is_sqlite_url(url)
        self.engine = make_engine(
            url, sqlite_busy_timeout_seconds=sqlite_busy_timeout_seconds, **engine_kwargs
        )
        self.sessionmaker = sessionmaker(bind=self.engine, expire_on_commit=False)
        read_engine = (
            self.engine.execution_options(**{SQLITE_BEGIN_OPTION: "DEFERRED"})
            if self.is_sqlite
            else self.engine
        )
        self.read_sessionmaker = sessionmaker(bind=read_engine, expire_on_commit=False)
        # Single-statement reads on every request's path (`PrecompiledSelect`): on
        # PostgreSQL a pool of their own without the pre-ping, which would double their
        # round trips; `PrecompiledSelect` retries once on a dropped connection instead.
        self.hot_read_engine = (
            self.engine
            if self.is_sqlite
            else make_engine(url, **{**engine_kwargs, "pool_pre_ping": False})
        )
        from app.metrics import install_session_hooks  # metrics counts committed charges

        install_session_hooks(self.sessionmaker)

    @classmethod
    def from_settings(cls, settings: Any, **engine_kwargs: Any) -> Database:
        return cls(
            settings.database_url,
            sqlite_busy_timeout_seconds=settings.sqlite_busy_timeout_seconds,
            **engine_kwargs,
        )

    def session(self) -> Session:
        """A new read-write session; the caller commits or rolls back and closes it."""
        return self.sessionmaker()

    @contextmanager
    def unit_of_work(self) -> Iterator[Session]:
        """A read-write session committed once on success, rolled back on any error."""
        with self.sessionmaker() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    @contextmanager
    def read_only(self) -> Iterator[Session]:
        """A session for reads only; whatever it did is rolled back."""
        # Closing returns the connection to the pool, which rolls its transaction back;
        # unlike Session.rollback() it leaves loaded objects readable.
        with self.read_sessionmaker() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
        if self.hot_read_engine is not self.engine:
            self.hot_read_engine.dispose()
