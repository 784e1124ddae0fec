"""Alembic environment: metadata from `app.db`, URL from the config set in code."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from app.db import Base, make_engine

# Any constant: all privq migrators on one PostgreSQL database queue on this lock.
MIGRATION_ADVISORY_LOCK_ID = 0x70726976  # "priv"

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            is_sqlite = connection.dialect.name == "sqlite"
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
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
