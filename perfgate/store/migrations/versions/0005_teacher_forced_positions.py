"""Every teacher-forced position of a prompt that parted from the plain output.

`outputs.forced` keeps, for a prompt whose speculative output the plain server scored by
teacher forcing, the tokens compared and every position that is not the target's top token
(a near tie or a failure) with its margin. Nullable: older rows, and prompts compared
without teacher forcing, read as before.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("outputs", sa.Column("forced", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outputs") as outputs:
        outputs.drop_column("forced")
