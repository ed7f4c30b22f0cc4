"""Each commit as a bisect judged it.

`bisect_steps` keeps, per bisect and commit, the runs the judgement read and the likeness it
gave. A bisect that reuses runs another bisect recorded measures nothing at those commits, so
its own runs cannot show them; its report reads these rows. A history without them (older
bisects) is reported from its runs' tags as before.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bisect_steps",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("bisect", sa.String(40), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("profile", sa.String(200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("commit", sa.String(64), nullable=False),
        sa.Column("likeness", sa.String(20), nullable=False),
        sa.Column("run_ids", sa.JSON(), nullable=False),
        sa.Column("tag", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_bisect_steps_bisect", "bisect_steps", ["bisect"])


def downgrade() -> None:
    op.drop_index("ix_bisect_steps_bisect", table_name="bisect_steps")
    op.drop_table("bisect_steps")
