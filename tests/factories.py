"""Build measurements and run records from plain numbers, for store, report and gate tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from perfgate.config import Scenario
from perfgate.equivalence import compare_outputs
from perfgate.gate import Status, Verdict
from perfgate.results import Measurement, ModeResult, PhaseSummary, RunContext, RunRecord

FINGERPRINT = {"engine": "embedded", "gpu": "none", "perfgate": "0.1.0", "torch": "2.13.0+cpu"}


def mode_result(mode: str, tok_s: float, verify_ms: float = 5.0, repeats: int = 3) -> ModeResult:
    samples = {"output_tok_s": tuple(tok_s * (1 + 0.01 * i) for i in range(repeats))}
    phases = []
    if mode == "spec":
        samples["accept_length"] = (2.5,) * repeats
        samples["verify_ms"] = (verify_ms,) * repeats
        for r in range(repeats):
            for phase, ms in (
                ("draft", 1.0),
                ("verify", verify_ms),
                ("accept", 0.1),
                ("cycle", verify_ms + 1.5),
            ):
                phases.append(PhaseSummary(mode, phase, r, 40, ms, ms, ms * 1.1))
    return ModeResult(
        mode=mode,
        command=f"python -m server --{mode}",
        samples=samples,
        phases=tuple(phases),
        outputs=((1, 2, 3), (4, 5, 6)),
        server_info={"version": "0.1.0"},
    )


def measurement(
    scenario: str = "tiny",
    spec_tok_s: float = 120.0,
    plain_tok_s: float = 100.0,
    verify_ms: float = 5.0,
    started: datetime | None = None,
    spec_outputs: tuple[tuple[int, ...], ...] | None = None,
) -> Measurement:
    start = started or datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    spec = mode_result("spec", spec_tok_s, verify_ms)
    plain = mode_result("plain", plain_tok_s)
    if spec_outputs is not None:
        from dataclasses import replace

        spec = replace(spec, outputs=spec_outputs)
    return Measurement(
        scenario=scenario,
        profile="cpu",
        engine="embedded",
        fingerprint=dict(FINGERPRINT),
        plain=plain,
        spec=spec,
        equivalence=compare_outputs(spec.outputs, plain.outputs),
        started_at=start,
        finished_at=start + timedelta(seconds=30),
        config={"steps": 3},
    )


def record(
    measurement_: Measurement, status: Status = Status.PASS, commit: str = "abc123"
) -> RunRecord:
    verdicts = (
        Verdict(
            "output_tok_s",
            status,
            "+0.0% against a tolerance of 3%",
            120.0,
            120.0,
            0.0,
            tolerance=0.03,
        ),
    )
    return RunRecord(measurement_, RunContext(commit=commit, branch="main"), verdicts, status)


class QueuedMeasurer:
    """A Measurer (perfgate.pipeline) that hands out `measurements` in turn, launching nothing;
    `folders` says where each was asked for."""

    def __init__(self, *measurements: Measurement) -> None:
        self.queue = list(measurements)
        self.folders: list[Path] = []

    def measure(self, scenario: Scenario, folder: Path) -> Measurement:
        self.folders.append(folder)
        return self.queue.pop(0)
