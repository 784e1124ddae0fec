"""Alembic environment: metadata from `app.db`; the URL set in code by `app.migrations`
(`privq migrate`, start-up upgrades, tests), else privq's own setting
(`PRIVQ_DATABASE_URL`) when the `alembic` command runs from the repository root."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import text

from app.config import get_settings
from app.db import Base, make_engine

# Any constant: all privq migrators on one PostgreSQL database queue on this lock.
MIGRATION_ADVISORY_LOCK_ID = 0x70726976  # "priv"

config = context.config
target_metadata = Base.metadata
if config.config_file_name is not None:  # the `alembic` command with alembic.ini
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    return config.get_main_option("sqlalchemy.url") or get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(database_url())
    try:
        with engine.connect() as connection:
            is_sqlite = connection.dialect.name == "sqlite"
            if is_sqlite:
                # A batch migration rebuilds a table (copy, drop, rename); dropping a table
                # that other rows reference fails while foreign keys are enforced. SQLite
                # only switches enforcement outside a transaction; every reference is
                # checked again before the migration commits (below).
                # The driver's own connection: SQLAlchemy would BEGIN first.
                driver = connection.connection.dbapi_connection
                assert driver is not None
                driver.execute("PRAGMA foreign_keys=OFF")
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                compare_type=True,
                # SQLite cannot ALTER most things; batch mode rebuilds tables instead.
                render_as_batch=is_sqlite,
            )
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    # Replicas starting together must not both apply the same revision.
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:lock_id)"),
                        {"lock_id": MIGRATION_ADVISORY_LOCK_ID},
                    )
                context.run_migrations()
                if is_sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"migration left broken references: {broken[:5]}")
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
