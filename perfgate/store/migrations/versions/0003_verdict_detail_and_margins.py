"""Verdict details (runs judged, p-value, level, attribution) and equivalence margins.

`verdicts.detail` keeps, as JSON, what a verdict says beyond its columns: how many runs it
judged against how many approved ones, its p-value and test level, the earlier runs judged
with it, and the attribution of a throughput change. `outputs.outcome`, `outputs.margin` and
`outputs.margin_is_bound` keep what a prompt's first divergence meant (a near tie or not) and
the plain run's logprob gap there. All nullable: older rows read as before.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Adding nullable columns is an in-place ALTER TABLE on both backends: no table is copied.
    op.add_column("verdicts", sa.Column("detail", sa.JSON(), nullable=True))
    op.add_column("outputs", sa.Column("outcome", sa.String(length=10), nullable=True))
    op.add_column("outputs", sa.Column("margin", sa.Float(), nullable=True))
    op.add_column("outputs", sa.Column("margin_is_bound", sa.Boolean(), nullable=True))


def downgrade() -> None:
    # Batch mode: SQLite rebuilds the tables to drop columns.
    with op.batch_alter_table("outputs") as outputs:
        outputs.drop_column("margin_is_bound")
        outputs.drop_column("margin")
        outputs.drop_column("outcome")
    with op.batch_alter_table("verdicts") as verdicts:
        verdicts.drop_column("detail")
