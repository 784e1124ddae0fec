"""within-bin means: a measurement's kind

Revision ID: v15_within_bin_means
Revises: v14_tenant_ids
Create Date: 2026-11-29 11:40:00

A measurement row is a noisy marginal of counts (`marginal`, every existing row) or a
binned attribute's noisy per-bin sums of fractions within the bins
(`within_bin_means`), which answers use and no model fit reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "v15_within_bin_means"
down_revision: str | None = "v14_tenant_ids"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=32), server_default="marginal", nullable=False)
        )
        batch.create_check_constraint(
            op.f("ck_measurements_kind"), "kind IN ('marginal', 'within_bin_means')"
        )


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.drop_constraint(op.f("ck_measurements_kind"), type_="check")
        batch.drop_column("kind")
