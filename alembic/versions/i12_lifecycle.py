"""lifecycle: API keys of their own, disabled tenants, revoked grants, cancelled jobs,
purged and deleted datasets

Revision ID: i12_lifecycle
Revises: i10a_measurement_quarantine
Create Date: 2026-11-23 12:00:00

Each tenant's one key (tenants.api_key_hash, key_prefix) becomes its first row in
`api_keys`; a tenant may then hold several. Grants may be revoked, keeping their row
for the ledger, so "one grant per tenant and dataset" holds among unrevoked grants
only (a partial unique index). Jobs may be cancelled. Datasets record when their raw
records were purged and when they were deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i12_lifecycle"
down_revision: str | None = "i10a_measurement_quarantine"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE_GRANT = sa.text("revoked_at IS NULL")
JOB_STATUSES_BEFORE = "status IN ('queued', 'running', 'succeeded', 'failed')"
JOB_STATUSES_AFTER = "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')"


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_api_keys_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_index(op.f("ix_api_keys_tenant_id"), "api_keys", ["tenant_id"], unique=False)

    # Each tenant's key becomes its first row; the tenant's id (a UUID, unique) serves as
    # that key's id, so the copy is one statement that keeps every value as it is stored.
    op.execute(
        "INSERT INTO api_keys (id, tenant_id, key_hash, key_prefix, created_at) "
        "SELECT id, id, api_key_hash, key_prefix, created_at FROM tenants"
    )

    with op.batch_alter_table("tenants") as batch:
        batch.drop_constraint(op.f("uq_tenants_api_key_hash"), type_="unique")
        batch.drop_column("api_key_hash")
        batch.drop_column("key_prefix")
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))

    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("records_purged_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))

    with op.batch_alter_table("grants") as batch:
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
        batch.drop_constraint(op.f("uq_grants_tenant_id_dataset_id"), type_="unique")
    op.create_index(
        "uq_grants_active_tenant_dataset",
        "grants",
        ["tenant_id", "dataset_id"],
        unique=True,
        sqlite_where=ACTIVE_GRANT,
        postgresql_where=ACTIVE_GRANT,
    )

    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_status"), type_="check")
        batch.create_check_constraint(op.f("ck_jobs_status"), JOB_STATUSES_AFTER)
        batch.add_column(
            sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    # Cancelled jobs were stopped by an operator: as far as the old schema goes, failed.
    op.execute("UPDATE jobs SET status = 'failed' WHERE status = 'cancelled'")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("cancel_requested_at")
        batch.drop_constraint(op.f("ck_jobs_status"), type_="check")
        batch.create_check_constraint(op.f("ck_jobs_status"), JOB_STATUSES_BEFORE)

    # Only one grant per tenant and dataset again: revoked ones cannot all stay.
    op.drop_index("uq_grants_active_tenant_dataset", table_name="grants")
    with op.batch_alter_table("grants") as batch:
        batch.drop_column("revoked_at")
        batch.create_unique_constraint(
            op.f("uq_grants_tenant_id_dataset_id"), ["tenant_id", "dataset_id"]
        )

    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("deleted_at")
        batch.drop_column("records_purged_at")

    # Each tenant keeps its oldest key that is not revoked (a tenant without one gets an
    # unusable placeholder hash: its keys stay refused, as they were).
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("disabled_at")
        batch.add_column(sa.Column("api_key_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("key_prefix", sa.String(length=16), nullable=True))
    connection = op.get_bind()
    keys = connection.execute(
        sa.text(
            "SELECT tenant_id, key_hash, key_prefix FROM api_keys "
            "WHERE revoked_at IS NULL ORDER BY created_at DESC"
        )
    ).all()
    oldest = {tenant_id: (key_hash, prefix) for tenant_id, key_hash, prefix in keys}
    for (tenant_id,) in connection.execute(sa.text("SELECT id FROM tenants")).all():
        key_hash, prefix = oldest.get(tenant_id, ("revoked:" + uuid.uuid4().hex, "revoked"))
        connection.execute(
            sa.text("UPDATE tenants SET api_key_hash = :h, key_prefix = :p WHERE id = :id"),
            {"h": key_hash[:64], "p": prefix[:16], "id": tenant_id},
        )
    with op.batch_alter_table("tenants") as batch:
        batch.alter_column("api_key_hash", existing_type=sa.String(length=64), nullable=False)
        batch.alter_column("key_prefix", existing_type=sa.String(length=16), nullable=False)
        batch.create_unique_constraint(op.f("uq_tenants_api_key_hash"), ["api_key_hash"])
    op.drop_index(op.f("ix_api_keys_tenant_id"), table_name="api_keys")
    op.drop_table("api_keys")
