"""measurements: status (active | quarantined) and quarantine_reason

A measurement a model fit could not use is quarantined rather than deleted: it stays a
release (listed, charged) but no later fit includes it.

Revision ID: i10a_measurement_quarantine
Revises: 0002
Create Date: 2026-11-23 12:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i10a_measurement_quarantine"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("status", sa.String(length=16), server_default="active", nullable=False)
        )
        batch_op.add_column(sa.Column("quarantine_reason", sa.Text(), nullable=True))
        batch_op.create_check_constraint("status", "status IN ('active', 'quarantined')")


def downgrade() -> None:
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_measurements_status"), type_="check")
        batch_op.drop_column("quarantine_reason")
        batch_op.drop_column("status")
