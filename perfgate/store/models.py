"""The history's tables (SQLAlchemy 2.0 typed models). No row object leaves the store.

The migrations in migrations/versions create these tables; a test checks that the two agree.
Change a table here and add a revision there, never one without the other.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # perfgate.config.HISTORY_NAME_MAX: longer names are refused before anything is measured.
    scenario: Mapped[str] = mapped_column(String(200))
    profile: Mapped[str] = mapped_column(String(200))
    engine: Mapped[str] = mapped_column(String(50))
    status: Mapped[str] = mapped_column(String(20))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    commit: Mapped[str | None] = mapped_column(String(64))
    branch: Mapped[str | None] = mapped_column(String(300))
    pr: Mapped[str | None] = mapped_column(String(50))
    ci_url: Mapped[str | None] = mapped_column(Text)
    dirty: Mapped[bool]
    equivalent: Mapped[bool]
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JSON)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    servers: Mapped[dict[str, Any]] = mapped_column(JSON)  # mode -> command, info, log
    # What the run was judged against, in words (perfgate.reference.Reference.description).
    judged_against: Mapped[str | None] = mapped_column(Text)

    samples: Mapped[list[SampleRow]] = relationship(cascade="all, delete-orphan")
    phases: Mapped[list[PhaseRow]] = relationship(cascade="all, delete-orphan")
    outputs: Mapped[list[OutputRow]] = relationship(cascade="all, delete-orphan")
    verdicts: Mapped[list[VerdictRow]] = relationship(cascade="all, delete-orphan")

    __table_args__ = (
        Index("ix_runs_scenario_profile_started", "scenario", "profile", "started_at"),
        Index("ix_runs_branch", "branch", "started_at"),
        Index("ix_runs_pr", "pr", "started_at"),
    )


class SampleRow(Base):
    __tablename__ = "samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    mode: Mapped[str] = mapped_column(String(10))
    metric: Mapped[str] = mapped_column(String(50))
    repeat: Mapped[int]
    value: Mapped[float] = mapped_column(Float)

    # Covers a metric's history (no table row read) and the foreign key (its first column).
    __table_args__ = (Index("ix_samples_history", "run_id", "metric", "mode", "repeat", "value"),)


class PhaseRow(Base):
    __tablename__ = "phases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    mode: Mapped[str] = mapped_column(String(10))
    phase: Mapped[str] = mapped_column(String(50))
    repeat: Mapped[int]
    cycles: Mapped[int]
    median_ms: Mapped[float] = mapped_column(Float)
    mean_ms: Mapped[float] = mapped_column(Float)
    p90_ms: Mapped[float] = mapped_column(Float)


class OutputRow(Base):
    """Token ids per prompt, and how the speculative ones compared with the plain ones."""

    __tablename__ = "outputs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    prompt_index: Mapped[int]
    spec_ids: Mapped[list[int]] = mapped_column(JSON)
    plain_ids: Mapped[list[int]] = mapped_column(JSON)
    matched: Mapped[bool]
    prefix_len: Mapped[int]
    # What the first divergence means (perfgate.equivalence.Outcome) and the plain run's
    # logprob gap there, in nats (a lower bound when margin_is_bound).
    outcome: Mapped[str | None] = mapped_column(String(10))
    margin: Mapped[float | None] = mapped_column(Float)
    margin_is_bound: Mapped[bool | None]
    # With teacher forcing: {"compared": tokens, "positions": [[position, spec token, top
    # token, margin, outcome], ...]} (perfgate.equivalence.TokenCheck); None without.
    forced: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class VerdictRow(Base):
    __tablename__ = "verdicts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    metric: Mapped[str] = mapped_column(String(50))
    status: Mapped[str] = mapped_column(String(20))
    message: Mapped[str] = mapped_column(Text)
    baseline: Mapped[float | None] = mapped_column(Float)
    current: Mapped[float | None] = mapped_column(Float)
    change: Mapped[float | None] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    tolerance: Mapped[float | None] = mapped_column(Float)
    # runs, baseline_runs, p_value, alpha, with_runs and the attribution, as JSON
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class BisectStepRow(Base):
    """One commit as a bisect judged it: the runs it read (reused from the history or measured)
    and its likeness. A bisect that reuses another's runs records no run of its own at that
    commit; this row is how its report still shows the commit (perfgate.report.bisects)."""

    __tablename__ = "bisect_steps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    bisect: Mapped[str] = mapped_column(String(40), index=True)
    name: Mapped[str] = mapped_column(String(200))  # the scenario its runs are recorded under
    profile: Mapped[str] = mapped_column(String(200))
    position: Mapped[int]  # the commit's place in the range: 0 the good end
    commit: Mapped[str] = mapped_column(String(64))
    likeness: Mapped[str] = mapped_column(String(20))  # "good end", or a Likeness value
    run_ids: Mapped[list[int]] = mapped_column(JSON)
    tag: Mapped[dict[str, Any]] = mapped_column(JSON)  # the bisect's entry in its runs' config
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
