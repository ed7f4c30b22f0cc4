"""Indexes for the history's questions: a metric across runs, runs of a branch or PR.

`ix_samples_history` covers "the values of one metric in one run" (run, metric, mode, repeat,
value), so a metric's history reads no table row; it starts with run_id, so it also serves the
foreign key and replaces `ix_samples_run_id`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-02
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SAMPLE_HISTORY = ["run_id", "metric", "mode", "repeat", "value"]


def upgrade() -> None:
    op.create_index("ix_samples_history", "samples", SAMPLE_HISTORY)
    op.drop_index("ix_samples_run_id", table_name="samples")
    op.create_index("ix_runs_branch", "runs", ["branch", "started_at"])
    op.create_index("ix_runs_pr", "runs", ["pr", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_pr", table_name="runs")
    op.drop_index("ix_runs_branch", table_name="runs")
    op.create_index("ix_samples_run_id", "samples", ["run_id"])
    op.drop_index("ix_samples_history", table_name="samples")
