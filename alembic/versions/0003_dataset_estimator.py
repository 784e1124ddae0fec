"""datasets.estimator and model_versions.estimator: "mle" or "cgm-em"

Revision ID: 0003_estimator
Revises: i12_lifecycle
Create Date: 2026-11-23 12:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_estimator"
down_revision: str | None = "i12_lifecycle"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing datasets and versions were all fitted by maximum likelihood.
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column("estimator", sa.String(length=16), server_default="mle", nullable=False)
        )
    with op.batch_alter_table("model_versions") as batch:
        batch.add_column(
            sa.Column("estimator", sa.String(length=16), server_default="mle", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("model_versions") as batch:
        batch.drop_column("estimator")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("estimator")
