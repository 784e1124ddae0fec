"""Migration v14_tenant_ids numbers existing rows: measurements per dataset and ledger
lines per grant, 1, 2, … in key order, whatever other datasets' rows lie between."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, text

from app.migrations import alembic_config, upgrade_to_head

SETUP = [
    "INSERT INTO tenants (id, name, created_at) VALUES ('t', 'n', CURRENT_TIMESTAMP)",
    "INSERT INTO datasets (id, name, rows, schema_json, created_at) "
    "VALUES ('a', 'a', 1, '{}', CURRENT_TIMESTAMP), ('b', 'b', 1, '{}', CURRENT_TIMESTAMP)",
    "INSERT INTO grants (id, tenant_id, dataset_id, rho_limit_units, created_at) "
    "VALUES ('ga', 't', 'a', 50, CURRENT_TIMESTAMP), ('gb', 't', 'b', 50, CURRENT_TIMESTAMP)",
    "INSERT INTO jobs (id, dataset_id, tenant_id, kind, params, status, attempts, created_at) "
    "VALUES ('ja', 'a', 't', 'measure', '{}', 'queued', 0, CURRENT_TIMESTAMP), "
    "('jb', 'b', 't', 'measure', '{}', 'queued', 0, CURRENT_TIMESTAMP)",
]
# Interleaved: a, b, a, b, b, a.
ORDER = ["a", "b", "a", "b", "b", "a"]


def test_existing_rows_are_numbered_in_their_dataset_and_grant(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'numbered.db'}"
    command.upgrade(alembic_config(url), "v13_sources")
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in SETUP:
                connection.execute(text(statement))
            for position, owner in enumerate(ORDER):
                connection.execute(
                    text(
                        "INSERT INTO measurements (dataset_id, job_id, position, attributes, "
                        'noise, scale, rho_units, "values", created_at, status) VALUES '
                        "(:d, :j, :p, '[\"x\"]', 'gaussian', 1.0, 1, x'00', CURRENT_TIMESTAMP, "
                        "'active')"
                    ),
                    {"d": owner, "j": f"j{owner}", "p": position},
                )
                connection.execute(
                    text(
                        "INSERT INTO ledger_entries (grant_id, tenant_id, dataset_id, rho_units, "
                        "kind, job_id, description, created_at) VALUES "
                        "(:g, 't', :d, 1, 'charge', :j, '', CURRENT_TIMESTAMP)"
                    ),
                    {"g": f"g{owner}", "d": owner, "j": f"j{owner}"},
                )
        upgrade_to_head(url)
        with engine.connect() as connection:
            measured = connection.execute(
                text("SELECT dataset_id, number FROM measurements ORDER BY id")
            ).all()
            lines = connection.execute(
                text("SELECT grant_id, number FROM ledger_entries ORDER BY id")
            ).all()
    finally:
        engine.dispose()
    assert [tuple(row) for row in measured] == [
        ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)
    ]  # fmt: skip
    assert [tuple(row) for row in lines] == [
        ("ga", 1), ("gb", 1), ("ga", 2), ("gb", 2), ("gb", 3), ("ga", 3)
    ]  # fmt: skip
