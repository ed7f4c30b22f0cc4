"""Teacher forcing: every speculative token compared, on constructed cases and a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from perfgate.config import Scenario, load_config
from perfgate.engines.client import EngineClient
from perfgate.engines.launch import free_port, running_server
from perfgate.engines.server_commands import server_command
from perfgate.equivalence import ForcedToken, Outcome, compare_outputs
from perfgate.errors import InfrastructureError
from perfgate.measure import assemble_measurement, measure_mode, score_differing, teacher_force
from perfgate.pipeline import ServerPair
from perfgate.report import render_report
from perfgate.results import Measurement, ModeResult
from perfgate.store import close_history, load_run, open_history, record_run
from perfgate.store.run_dicts import run_from_dict, run_to_dict
from perfgate.teacher import parse_forced, score_outputs, teacher_forcing_body

from . import factories
from .conftest import write_config

PLAIN = list(range(100, 200))  # 100 tokens


def confident(tokens: list[int]) -> list[ForcedToken]:
    """Scores where the target is sure of every given token."""
    return [ForcedToken(-0.01, ((-0.01, t), (-5.0, 7))) for t in tokens]


def near_tie(token: int, over: int, margin: float) -> ForcedToken:
    """The target prefers `over` by `margin` nats to the given `token`."""
    return ForcedToken(-0.70 - margin, ((-0.70, over), (-0.70 - margin, token)))


def with_near_tie_at(position: int) -> tuple[list[int], list[ForcedToken]]:
    """A speculative output that parts from PLAIN at a near tie, then goes its own way."""
    spec = [*PLAIN[:position], 999, *range(500, 500 + 99 - position)]
    scores = confident(spec)
    scores[position] = near_tie(999, PLAIN[position], 0.02)
    return spec, scores


def test_a_bug_after_an_earlier_near_tie_is_caught() -> None:
    spec, scores = with_near_tie_at(30)
    spec[70] = 4242  # a draft token accepted that the target ranks 3 nats below its choice
    scores[70] = ForcedToken(-3.05, ((-0.05, 555), (-1.0, 556)))
    report = compare_outputs([spec], [PLAIN], teacher=[scores], max_near_tie_share=1.0)
    assert not report.ok
    (bad,) = report.diverged
    assert bad.first_divergence == 30 and bad.margin == pytest.approx(0.02)
    assert [(c.position, c.outcome) for c in bad.positions] == [
        (30, Outcome.NEAR_TIE),
        (70, Outcome.DIVERGED),
    ]
    assert report.checked_share == 1.0
    summary = report.summary()
    assert "near ties at token 30 (margin 0.02)" in summary
    assert "not the target's choice at token 70 (spec 4242, top 555, margin 3)" in summary
    assert summary.endswith("100% of tokens compared")


def test_a_bug_at_the_last_token_is_caught() -> None:
    spec, scores = with_near_tie_at(10)
    spec[-1] = 4242
    scores[-1] = ForcedToken(-2.0, ((-0.2, 77),))
    report = compare_outputs([spec, PLAIN], [PLAIN, PLAIN], teacher=[scores, None])
    (bad,) = report.diverged
    assert bad.positions[-1].position == 99 and bad.positions[-1].margin == pytest.approx(1.8)
    assert not report.ok and report.checked_share == 1.0


def test_an_output_whose_only_differences_are_near_ties_passes() -> None:
    spec, scores = with_near_tie_at(20)
    scores[60] = near_tie(spec[60], 31, 0.1)  # later still, the target's top two nearly tie
    report = compare_outputs(
        [spec, PLAIN, PLAIN], [PLAIN] * 3, teacher=[scores, None, None], max_near_tie_share=0.5
    )
    assert report.ok
    (tie,) = report.near_ties
    assert [(c.position, round(c.margin or 0, 6)) for c in tie.positions] == [(20, 0.02), (60, 0.1)]
    assert report.checked_share == 1.0
    assert "near ties at token 20 (margin 0.02), token 60 (margin 0.1)" in report.summary()
    assert report.summary().endswith("100% of tokens compared")


def test_identical_outputs_are_compared_exactly_and_scores_ignored() -> None:
    wrong = [ForcedToken(-9.0, ((-0.1, 1),))] * len(PLAIN)  # would fail every position
    report = compare_outputs([PLAIN], [PLAIN], teacher=[wrong])
    assert report.ok and report.summary() == "1/1 prompts token-identical"


def test_unscored_positions_scores_at_odds_and_other_lengths_fail() -> None:
    spec, scores = with_near_tie_at(40)
    short = compare_outputs([spec], [PLAIN], teacher=[scores[:50]], max_near_tie_share=1.0)
    assert not short.ok and short.checked_share == pytest.approx(0.5)
    assert "token 50 (spec 509, not scored)" in short.summary()
    odd = list(scores)
    odd[41] = ForcedToken(-0.1, ((-0.5, 3),))  # the token scored above the listed top one
    assert not compare_outputs([spec], [PLAIN], teacher=[odd], max_near_tie_share=1.0).ok
    longer = compare_outputs([[*spec, 5]], [PLAIN], teacher=[[*scores, *confident([5])]])
    assert not longer.ok and "(spec 101 tokens, plain 100)" in longer.summary()


def test_the_request_scores_from_the_prompts_last_token() -> None:
    body = teacher_forcing_body([[1, 2, 3], [4]], [[5, 6], [7]], 2)
    assert body["input_ids"] == [[1, 2, 3, 5, 6], [4, 7]]
    assert body["logprob_start_len"] == [2, 0]
    assert body["sampling_params"]["max_new_tokens"] == 0 and body["top_logprobs_num"] == 2
    # SGLang's answer: entry 0 (the prompt's last token) without a logprob.
    meta = {
        "input_token_logprobs": [[None, 3, None], [-0.1, 5, "a"], [-2.5, 6, None]],
        "input_top_logprobs": [None, [[-0.1, 5, "a"], [-3, 8, None]], [[-0.5, 9, None]]],
    }
    scores = parse_forced({"meta_info": meta}, [5, 6])
    assert scores == (
        ForcedToken(-0.1, ((-0.1, 5), (-3.0, 8))),
        ForcedToken(-2.5, ((-0.5, 9),)),
    )
    with pytest.raises(InfrastructureError, match="scored token 6 where the output has 7"):
        parse_forced({"meta_info": meta}, [5, 7])
    with pytest.raises(InfrastructureError, match="expected 2 of each"):
        parse_forced({"meta_info": meta}, [5])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    folder = tmp_path_factory.mktemp("config")
    return load_config(write_config(folder)).scenarios["tiny"]


@pytest.fixture(scope="module")
def plain_client(
    tiny: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineClient]:
    """The tiny scenario's plain server, a real process on 127.0.0.1."""
    log = tmp_path_factory.mktemp("server") / "server-plain.log"
    command = server_command(tiny, "plain", port=free_port())
    with (
        running_server(command, log, tiny.startup_timeout_s) as server,
        EngineClient(server.base_url, tiny.request_timeout_s) as client,
    ):
        yield client


def test_teacher_forcing_logprobs_equal_the_plain_decodes(
    tiny: Scenario, plain_client: EngineClient
) -> None:
    decoded = plain_client.generate(tiny.prompts, tiny.max_new_tokens, top_logprobs_num=2)
    outputs = [c.output_ids for c in decoded]
    scored = score_outputs(plain_client, tiny.prompts, outputs)
    for completion, scores in zip(decoded, scored, strict=True):
        assert len(scores) == len(completion.output_ids) == tiny.max_new_tokens
        for logprob, top, forced in zip(
            completion.output_token_logprobs, completion.top_logprobs, scores, strict=True
        ):
            assert forced.logprob == pytest.approx(logprob, abs=1e-4)
            assert [t for _, t in forced.top] == [t for _, t in top]
            assert [lp for lp, _ in forced.top] == pytest.approx([lp for lp, _ in top], abs=1e-4)
    report = compare_outputs(outputs, outputs, teacher=scored)
    assert report.ok and report.checked_share == 1.0


def _mode(mode: str, outputs: Any) -> ModeResult:
    return ModeResult(mode, "", {"output_tok_s": (1.0,)}, (), tuple(tuple(o) for o in outputs))


def test_the_plain_server_catches_a_token_it_would_not_choose(
    tiny: Scenario, plain_client: EngineClient
) -> None:
    decoded = plain_client.generate(tiny.prompts, tiny.max_new_tokens)
    plain = [list(c.output_ids) for c in decoded]
    buggy = [list(o) for o in plain]
    last = buggy[1][-1]
    buggy[1][-1] = (last + 128) % 256  # a byte the tiny target would not write there
    scenario = replace(tiny, prompts=tiny.prompts)
    # Scored by the plain server up already, as `teacher_force` scores on the one it launches
    # (that launch is run by tests/sweep/test_runner.py's inequivalent point and the slow
    # tests below): one server start fewer.
    teacher = score_differing(plain_client, scenario, buggy, plain)
    assert teacher is not None and teacher[0] is None and teacher[1] is not None
    measurement = assemble_measurement(
        scenario, "here", _mode("plain", plain), _mode("spec", buggy), datetime.now(UTC), teacher
    )
    report = measurement.equivalence
    assert not report.ok and report.checked_share == 1.0
    (bad,) = report.diverged
    (check,) = bad.positions
    assert check.position == tiny.max_new_tokens - 1 and check.outcome is Outcome.DIVERGED
    assert check.top_token == last


def test_the_history_and_the_export_keep_every_forced_position(tmp_path: Path) -> None:
    spec, scores = with_near_tie_at(30)
    spec[70], scores[70] = 4242, ForcedToken(-3.05, ((-0.05, 555),))
    base = factories.measurement(spec_outputs=((1, 2, 3), (4, 5, 6)))
    report = compare_outputs(
        [spec, [4, 5, 6]], [PLAIN, [4, 5, 6]], teacher=[scores, None], max_near_tie_share=1.0
    )
    plain = replace(base.plain, outputs=(tuple(PLAIN), (4, 5, 6)))
    m = replace(base, spec=replace(base.spec, outputs=(tuple(spec), (4, 5, 6))), plain=plain)
    original = factories.record(replace(m, equivalence=report))
    sessions = open_history(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        with sessions.begin() as session:
            run_id = record_run(session, original)
        with sessions() as session:
            loaded = load_run(session, run_id)
    finally:
        close_history(sessions)
    assert loaded.measurement.equivalence.prompts == report.prompts
    exported = run_from_dict(json.loads(json.dumps(run_to_dict(original))))
    assert exported.measurement.equivalence.prompts == report.prompts
    assert "not the target's choice at token 70" in loaded.measurement.equivalence.summary()
    page = render_report([replace(loaded, id=1)])
    assert "near tie at token 30 (margin 0.02); diverged at token 70 (spec 4242, top 555" in page


class CountedSeams:
    """ServerPair's `launch` and `score` seams over the real ones, counting their calls."""

    def __init__(self) -> None:
        self.launches: list[str] = []
        self.scores = 0

    def launch(self, scenario: Scenario, mode: str, folder: Path, **kwargs: Any) -> ModeResult:
        self.launches.append(mode)
        return measure_mode(scenario, mode, folder, **kwargs)  # type: ignore[arg-type]

    def score(self, *args: Any) -> Any:
        self.scores += 1
        return teacher_force(*args)


@pytest.fixture(scope="module")
def parting(tiny: Scenario) -> Scenario:
    """The tiny scenario with outputs that part: simulated acceptance takes draft tokens the
    target would not choose. Gated here (a config refuses that pairing) to be teacher-forced."""
    simulated = ("--debug-simulate-accept-rate", "0.5")
    return replace(tiny, spec_extra_args=(*tiny.spec_extra_args, *simulated), repeats=2)


@pytest.fixture(scope="module")
def fresh_pair(
    parting: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Measurement, CountedSeams, Path]:
    """One pair measured with a fresh plain twin: the speculative server, then the plain."""
    seams, folder = CountedSeams(), tmp_path_factory.mktemp("fresh")
    servers = ServerPair("here", launch=seams.launch, score=seams.score)
    return servers.measure(parting, folder), seams, folder


@pytest.mark.slow
def test_a_fresh_plain_twin_scores_parted_outputs_without_another_launch(
    fresh_pair: tuple[Measurement, CountedSeams, Path],
) -> None:
    measurement, seams, folder = fresh_pair
    assert seams.launches == ["spec", "plain"] and seams.scores == 0
    assert sorted(p.name for p in folder.glob("server-*.log")) == [
        "server-plain.log",
        "server-spec.log",
    ]
    assert measurement.spec.outputs != measurement.plain.outputs
    report = measurement.equivalence
    assert report.checked_share == 1.0 and report.summary().endswith("100% of tokens compared")
    assert all(p.forced for p in report.prompts if p.spec_len and p.outcome is not Outcome.MATCH)


@pytest.mark.slow
def test_the_scoring_requests_count_in_no_plain_figure(
    fresh_pair: tuple[Measurement, CountedSeams, Path], parting: Scenario
) -> None:
    # Scored after the last timed repeat: each repeat holds the same prefills and cycles (a
    # scoring request counted into the last one would add a prefill), and one tok/s each.
    plain = fresh_pair[0].plain
    assert len(plain.samples["output_tok_s"]) == parting.repeats
    per_phase: dict[str, set[int]] = {}
    for summary in plain.phases:
        per_phase.setdefault(summary.phase, set()).add(summary.cycles)
    assert per_phase and all(len(counts) == 1 for counts in per_phase.values()), per_phase
    assert {s.repeat for s in plain.phases} == set(range(parting.repeats))


class ReplayedSpec(CountedSeams):
    """CountedSeams whose `launch` gives back the speculative result the fresh pair measured
    of the same scenario instead of launching that server again; `score` stays the real one."""

    def __init__(self, spec: ModeResult) -> None:
        super().__init__()
        self.spec = spec

    def launch(self, scenario: Scenario, mode: str, folder: Path, **kwargs: Any) -> ModeResult:
        self.launches.append(mode)
        return self.spec


@pytest.mark.slow
def test_reused_plain_figures_score_through_one_more_plain_launch(
    fresh_pair: tuple[Measurement, CountedSeams, Path], parting: Scenario, tmp_path: Path
) -> None:
    reused = replace(fresh_pair[0].plain, reused_from=1)
    # What is checked is the plain launch that scores the parted outputs, not the speculative
    # server's: the fresh pair's speculative result stands in for a second launch of it.
    seams = ReplayedSpec(fresh_pair[0].spec)
    servers = ServerPair(
        "here", launch=seams.launch, score=seams.score, plain_source=lambda s, c: reused
    )
    measurement = servers.measure(parting, tmp_path)
    assert seams.launches == ["spec"] and seams.scores == 1
    assert (tmp_path / "server-teacher.log").exists()
    assert measurement.spec.outputs != measurement.plain.outputs
    assert measurement.equivalence.checked_share == 1.0
