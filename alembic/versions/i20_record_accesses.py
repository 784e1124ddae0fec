"""record_accesses: the write-ahead log of every access to raw records, and
measurements.access_id naming the access that produced each measurement

Revision ID: i20_record_accesses
Revises: 0003_estimator
Create Date: 2026-11-26 07:00:00

A job's used ρ is what its accesses recorded before they ran; refunds return the rest.
Measurements stored before this revision have no access row: for them the used ρ is
still what the stored rows cost (app.services.refunds takes the larger of the two).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i20_record_accesses"
down_revision: str | None = "0003_estimator"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "record_accesses",
        sa.Column("id", BIG_KEY, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("round_index", sa.Integer(), nullable=True),
        sa.Column("exact_rho", sa.Text(), nullable=False),
        sa.Column("rho_units", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "purpose IN ('measure', 'round')", name=op.f("ck_record_accesses_purpose")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_record_accesses_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_record_accesses_job_id_jobs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_record_accesses")),
        sa.UniqueConstraint("job_id", "sequence", name=op.f("uq_record_accesses_job_id_sequence")),
    )
    op.create_index(
        op.f("ix_record_accesses_dataset_id"), "record_accesses", ["dataset_id"], unique=False
    )
    op.create_index(op.f("ix_record_accesses_job_id"), "record_accesses", ["job_id"], unique=False)
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("access_id", BIG_KEY, nullable=True))
        batch.create_foreign_key(
            op.f("fk_measurements_access_id_record_accesses"),
            "record_accesses",
            ["access_id"],
            ["id"],
        )


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.drop_constraint(op.f("fk_measurements_access_id_record_accesses"), type_="foreignkey")
        batch.drop_column("access_id")
    op.drop_index(op.f("ix_record_accesses_job_id"), table_name="record_accesses")
    op.drop_index(op.f("ix_record_accesses_dataset_id"), table_name="record_accesses")
    op.drop_table("record_accesses")
