"""What each run was judged against, in words.

`runs.judged_against` keeps one line: the reviewed baseline file and its approved runs, this
machine's earlier runs (a local run without a reviewed baseline), or that the run was the first
one here and became the reference. Nullable: older rows read as before.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("judged_against", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("judged_against")
