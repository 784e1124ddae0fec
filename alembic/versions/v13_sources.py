"""datasets registered by reference: status and the source's location and fingerprint

Revision ID: v13_sources
Revises: v12_privacy_unit
Create Date: 2026-11-29 08:45:00

A dataset is `ready`, `registering` or `rejected`; an uploaded one is ready at once.
A registered source keeps its format, URI, fingerprint (each file's path, size and
version), the secret of its unit cap's row key and, if rejected, why. Existing
datasets are uploads: ready, with no source.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "v13_sources"
down_revision: str | None = "v12_privacy_unit"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column("status", sa.String(length=16), server_default="ready", nullable=False)
        )
        batch.add_column(sa.Column("source_format", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("source_uri", sa.Text(), nullable=True))
        batch.add_column(sa.Column("source_fingerprint", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("source_secret", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("source_error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("source_error")
        batch.drop_column("source_secret")
        batch.drop_column("source_fingerprint")
        batch.drop_column("source_uri")
        batch.drop_column("source_format")
        batch.drop_column("status")
