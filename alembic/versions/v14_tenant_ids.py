"""tenant-visible ids: measurements numbered per dataset, ledger lines per grant

Revision ID: v14_tenant_ids
Revises: i44_queue_turns
Create Date: 2026-11-29 09:05:00

The API showed the global integer keys of measurements and ledger lines: a tenant
seeing measurement ids 1, 87 and 88 learnt that 85 measurements were made on datasets
it cannot see. Each row now has a `number` — a measurement's in its dataset, a ledger
line's on its grant, 1, 2, … in the order of the key — which the API shows as `id`; the
keys stay, for joins and order. Existing rows are numbered here in key order.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "v14_tenant_ids"
down_revision: str | None = "i44_queue_turns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, the column whose rows are numbered together)
NUMBERED = (("measurements", "dataset_id"), ("ledger_entries", "grant_id"))


def _number_existing_rows(table: str, scope: str) -> None:
    """Number each scope's rows 1, 2, … in key order (in batches: a ledger may be long)."""
    connection = op.get_bind()
    rows = connection.execute(sa.text(f"SELECT id, {scope} FROM {table} ORDER BY id")).all()
    counters: dict[str, int] = {}
    numbered = []
    for row_id, owner in rows:
        counters[owner] = counters.get(owner, 0) + 1
        numbered.append({"row_id": row_id, "number": counters[owner]})
    update = sa.text(f"UPDATE {table} SET number = :number WHERE id = :row_id")
    for start in range(0, len(numbered), 10_000):
        connection.execute(update, numbered[start : start + 10_000])


def upgrade() -> None:
    for table, scope in NUMBERED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("number", sa.Integer(), nullable=True))
        _number_existing_rows(table, scope)
        with op.batch_alter_table(table) as batch:
            batch.alter_column("number", existing_type=sa.Integer(), nullable=False)
            batch.create_unique_constraint(op.f(f"uq_{table}_{scope}_number"), [scope, "number"])


def downgrade() -> None:
    for table, scope in NUMBERED:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(op.f(f"uq_{table}_{scope}_number"), type_="unique")
            batch.drop_column("number")
