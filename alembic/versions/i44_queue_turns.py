"""the fair queue's turns: when a claim last took a job of each queue

Revision ID: i44_queue_turns
Revises: v13_sources
Create Date: 2026-11-29 08:40:00

One row per queue (a tenant's id, or "" for the tenant-less jobs: refits,
registrations), written by every claim; the claim takes the oldest job of the queue
served least recently. No rows at first: every queue counts as never served, so the
jobs already queued are taken oldest first, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i44_queue_turns"
down_revision: str | None = "v13_sources"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queue_turns",
        sa.Column("queue", sa.String(length=36), nullable=False),
        sa.Column("served_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("queue", name=op.f("pk_queue_turns")),
    )


def downgrade() -> None:
    op.drop_table("queue_turns")
