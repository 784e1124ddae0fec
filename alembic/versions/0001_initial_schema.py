"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 04:44:56.991140
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("schema_json", sa.JSON(), nullable=False),
        sa.Column("rho_total_units", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
    )
    op.create_table(
        "service_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_service_secrets")),
    )
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("api_key_hash", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("api_key_hash", name=op.f("uq_tenants_api_key_hash")),
        sa.UniqueConstraint("name", name=op.f("uq_tenants_name")),
    )
    op.create_table(
        "dataset_columns",
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_dataset_columns_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dataset_id", "position", name=op.f("pk_dataset_columns")),
    )
    op.create_table(
        "grants",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("rho_limit_units", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("rho_limit_units > 0", name=op.f("ck_grants_rho_limit_positive")),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_grants_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_grants_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_grants")),
        sa.UniqueConstraint("tenant_id", "dataset_id", name=op.f("uq_grants_tenant_id_dataset_id")),
    )
    op.create_index(op.f("ix_grants_dataset_id"), "grants", ["dataset_id"], unique=False)
    op.create_index(op.f("ix_grants_tenant_id"), "grants", ["tenant_id"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("progress", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("model_version", sa.Integer(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed')", name=op.f("ck_jobs_status")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_jobs_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_jobs_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_dataset_id"), "jobs", ["dataset_id"], unique=False)
    op.create_index("ix_jobs_status_created_at", "jobs", ["status", "created_at"], unique=False)

    op.create_table(
        "ledger_entries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("grant_id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("rho_units", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(kind = 'charge' AND rho_units > 0) OR (kind = 'refund' AND rho_units < 0)",
            name=op.f("ck_ledger_entries_sign"),
        ),
        sa.CheckConstraint("kind IN ('charge', 'refund')", name=op.f("ck_ledger_entries_kind")),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_ledger_entries_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["grant_id"], ["grants.id"], name=op.f("fk_ledger_entries_grant_id_grants")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_ledger_entries_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
        sa.UniqueConstraint(
            "grant_id", "idempotency_key", name=op.f("uq_ledger_entries_grant_id_idempotency_key")
        ),
    )
    op.create_index(
        op.f("ix_ledger_entries_dataset_id"), "ledger_entries", ["dataset_id"], unique=False
    )
    op.create_index(
        op.f("ix_ledger_entries_grant_id"), "ledger_entries", ["grant_id"], unique=False
    )
    op.create_index(op.f("ix_ledger_entries_job_id"), "ledger_entries", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_ledger_entries_job_id"), table_name="ledger_entries")
    op.drop_index(op.f("ix_ledger_entries_grant_id"), table_name="ledger_entries")
    op.drop_index(op.f("ix_ledger_entries_dataset_id"), table_name="ledger_entries")

    op.drop_table("ledger_entries")
    op.drop_index("ix_jobs_status_created_at", table_name="jobs")
    op.drop_index(op.f("ix_jobs_dataset_id"), table_name="jobs")

    op.drop_table("jobs")
    op.drop_index(op.f("ix_grants_tenant_id"), table_name="grants")
    op.drop_index(op.f("ix_grants_dataset_id"), table_name="grants")

    op.drop_table("grants")
    op.drop_table("dataset_columns")
    op.drop_table("tenants")
    op.drop_table("service_secrets")
    op.drop_table("datasets")
