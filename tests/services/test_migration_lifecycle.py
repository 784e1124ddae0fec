"""The lifecycle migration keeps every tenant's key working, and downgrades cleanly."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from alembic import command
from sqlalchemy import create_engine, text

from app.migrations import alembic_config, check_models_match, upgrade_to_head
from app.services import keys


def test_existing_keys_move_to_api_keys_and_back(empty_database_url: str) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0002")
    key = "pq_" + "k" * 43
    engine = create_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO tenants (id, name, api_key_hash, key_prefix, created_at) "
                    "VALUES ('t1', 'old-tenant', :h, :p, CURRENT_TIMESTAMP)"
                ),
                {"h": hashlib.sha256(key.encode()).hexdigest(), "p": key[:10]},
            )
        upgrade_to_head(empty_database_url)
        check_models_match(empty_database_url)
        match = keys.match_on(engine, keys.hash_key(key))
        assert match is not None
        assert (match.tenant_id, match.tenant_name, match.revoked, match.tenant_disabled) == (
            "t1",
            "old-tenant",
            False,
            False,
        )
        assert abs(match.tenant_created_at - datetime.now(UTC)) < timedelta(hours=1)

        command.downgrade(config, "0002")
        with engine.connect() as connection:
            restored = connection.execute(
                text("SELECT api_key_hash, key_prefix FROM tenants WHERE id = 't1'")
            ).one()
        assert restored == (hashlib.sha256(key.encode()).hexdigest(), key[:10])
        upgrade_to_head(empty_database_url)
        assert keys.match_on(engine, keys.hash_key(key)) is not None
    finally:
        engine.dispose()


def test_the_migration_rebuilds_referenced_tables_on_sqlite(tmp_path) -> None:
    # A grant with a ledger line and a job: SQLite's batch mode must rebuild tenants,
    # grants and jobs while other rows point at them.
    url = f"sqlite:///{tmp_path / 'referenced.db'}"
    command.upgrade(alembic_config(url), "0002")
    engine = create_engine(url)
    statements = [
        "INSERT INTO tenants (id, name, api_key_hash, key_prefix, created_at) "
        "VALUES ('t', 'n', 'h', 'p', CURRENT_TIMESTAMP)",
        "INSERT INTO datasets (id, name, rows, schema_json, created_at) "
        "VALUES ('d', 'n', 1, '{}', CURRENT_TIMESTAMP)",
        "INSERT INTO grants (id, tenant_id, dataset_id, rho_limit_units, created_at) "
        "VALUES ('g', 't', 'd', 5, CURRENT_TIMESTAMP)",
        "INSERT INTO jobs (id, dataset_id, tenant_id, kind, params, status, attempts, "
        "created_at) VALUES ('j', 'd', 't', 'measure', '{}', 'queued', 0, CURRENT_TIMESTAMP)",
        "INSERT INTO ledger_entries (grant_id, tenant_id, dataset_id, rho_units, kind, job_id, "
        "description, created_at) VALUES ('g', 't', 'd', 2, 'charge', 'j', '', CURRENT_TIMESTAMP)",
    ]
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
        upgrade_to_head(url)
        with engine.connect() as connection:
            assert connection.execute(text("SELECT tenant_id FROM grants")).scalar() == "t"
            assert connection.execute(text("SELECT count(*) FROM ledger_entries")).scalar() == 1
            assert connection.execute(text("PRAGMA foreign_key_check")).fetchall() == []
    finally:
        engine.dispose()
