"""datasets.unit_column and datasets.unit_max_rows: the privacy unit

Revision ID: v12_privacy_unit
Revises: i20_record_accesses
Create Date: 2026-11-26 07:35:00

A dataset's privacy unit is the set of rows sharing a value of `unit_column` (the
column's name only; its values are never stored); at most `unit_max_rows` rows of a
unit are kept, and every cost uses that bound as its sensitivity. Existing datasets
protect one row (no column, k = 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "v12_privacy_unit"
down_revision: str | None = "i20_record_accesses"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("unit_column", sa.String(length=200), nullable=True))
        batch.add_column(
            sa.Column("unit_max_rows", sa.Integer(), server_default="1", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("unit_max_rows")
        batch.drop_column("unit_column")
