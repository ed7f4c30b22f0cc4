"""The first released schema: runs with their samples, phases, outputs and verdicts.

Frozen: this is the schema that perfgate 0.1 created before migrations existed, so a history
from then is adopted as this revision and upgraded from it. Never edit it; add a revision.

Revision ID: 0001
Revises:
Create Date: 2026-11-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _child(name: str, *columns: sa.Column[object]) -> None:
    """A table that belongs to one run (deleted with it)."""
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        *columns,
    )
    op.create_index(f"ix_{name}_run_id", name, ["run_id"])


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("scenario", sa.String(200), nullable=False),
        sa.Column("profile", sa.String(200), nullable=False),
        sa.Column("engine", sa.String(50), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("commit", sa.String(64)),
        sa.Column("branch", sa.String(300)),
        sa.Column("pr", sa.String(50)),
        sa.Column("ci_url", sa.Text()),
        sa.Column("dirty", sa.Boolean(), nullable=False),
        sa.Column("equivalent", sa.Boolean(), nullable=False),
        sa.Column("fingerprint", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("servers", sa.JSON(), nullable=False),
    )
    op.create_index(
        "ix_runs_scenario_profile_started", "runs", ["scenario", "profile", "started_at"]
    )
    _child(
        "samples",
        sa.Column("mode", sa.String(10), nullable=False),
        sa.Column("metric", sa.String(50), nullable=False),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
    )
    _child(
        "phases",
        sa.Column("mode", sa.String(10), nullable=False),
        sa.Column("phase", sa.String(50), nullable=False),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("cycles", sa.Integer(), nullable=False),
        sa.Column("median_ms", sa.Float(), nullable=False),
        sa.Column("mean_ms", sa.Float(), nullable=False),
        sa.Column("p90_ms", sa.Float(), nullable=False),
    )
    _child(
        "outputs",
        sa.Column("prompt_index", sa.Integer(), nullable=False),
        sa.Column("spec_ids", sa.JSON(), nullable=False),
        sa.Column("plain_ids", sa.JSON(), nullable=False),
        sa.Column("matched", sa.Boolean(), nullable=False),
        sa.Column("prefix_len", sa.Integer(), nullable=False),
    )
    _child(
        "verdicts",
        sa.Column("metric", sa.String(50), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("baseline", sa.Float()),
        sa.Column("current", sa.Float()),
        sa.Column("change", sa.Float()),
        sa.Column("ci_low", sa.Float()),
        sa.Column("ci_high", sa.Float()),
        sa.Column("tolerance", sa.Float()),
    )


def downgrade() -> None:
    for name in ("verdicts", "outputs", "phases", "samples", "runs"):
        op.drop_table(name)
