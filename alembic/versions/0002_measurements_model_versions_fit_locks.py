"""measurements, model versions, fit locks

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 04:53:34.200164
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fit_locks",
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_fit_locks_dataset_id_datasets")
        ),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_fit_locks")),
    )
    op.create_table(
        "model_versions",
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("cliques", sa.JSON(), nullable=False),
        sa.Column("high_water", sa.BigInteger(), nullable=False),
        sa.Column("measurement_count", sa.Integer(), nullable=False),
        sa.Column("solver", sa.String(length=32), nullable=False),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("loss", sa.Float(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_model_versions_dataset_id_datasets")
        ),
        sa.PrimaryKeyConstraint("dataset_id", "version", name=op.f("pk_model_versions")),
    )
    op.create_table(
        "measurements",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("noise", sa.String(length=16), nullable=False),
        sa.Column("scale", sa.Float(), nullable=False),
        sa.Column("rho_units", sa.BigInteger(), nullable=False),
        sa.Column("values", sa.LargeBinary(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("noise IN ('gaussian', 'laplace')", name=op.f("ck_measurements_noise")),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_measurements_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_measurements_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_measurements")),
        sa.UniqueConstraint("job_id", "position", name=op.f("uq_measurements_job_id_position")),
    )
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_measurements_dataset_id"), ["dataset_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_measurements_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("measurements", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_measurements_job_id"))
        batch_op.drop_index(batch_op.f("ix_measurements_dataset_id"))

    op.drop_table("measurements")
    op.drop_table("model_versions")
    op.drop_table("fit_locks")
