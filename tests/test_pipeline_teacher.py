"""Teacher forcing in the pair's order: the plain twin scores while up, or once more launched.

The servers are stand-ins (`ScoringLaunch`): they answer measure_mode's calls and, like
measure_mode, call `while_up` with a client before the server "stops"; the client answers
SGLang's teacher-forcing requests. The rest is real: ServerPair's order, perfgate.measure's
scoring rule, perfgate.teacher's requests and the equivalence check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.config import Scenario, load_config
from perfgate.engines.client import RequestRefused
from perfgate.errors import InfrastructureError
from perfgate.pipeline import ServerPair
from perfgate.results import ModeResult

from .conftest import write_config
from .factories import mode_result

PLAIN_OUTPUTS = ((1, 2, 3), (4, 5, 6))
PARTED_OUTPUTS = ((1, 2, 3), (4, 9, 9))  # the second prompt parts at its second token


class ScoringClient:
    """Answers the two teacher-forcing requests of perfgate.teacher, recording each body.

    Every scored token is ranked the target's top: a parted output scores as near ties.
    `refuse` answers as an engine without input logprobs; `garble` with a wrong token.
    """

    base_url = "http://stand-in"

    def __init__(self, refuse: bool = False, garble: bool = False) -> None:
        self.bodies: list[Mapping[str, Any]] = []
        self.refuse = refuse
        self.garble = garble

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        assert path == "/generate"
        self.bodies.append(body)
        if self.refuse:
            raise RequestRefused(f"{self.base_url}{path} refused return_logprob")
        if "text" in body:  # the prompts' own token ids
            return [
                {"meta_info": {"input_token_logprobs": [[None, 7, None], [-1.0, 8, None]]}}
                for _ in body["text"]
            ]
        items = []
        for ids, start in zip(body["input_ids"], body["logprob_start_len"], strict=True):
            scored = ids[start:]
            token = [
                [None if i == 0 else -0.01, t + self.garble, None] for i, t in enumerate(scored)
            ]
            top = [None] + [[[-0.01, t, None]] for t in scored[1:]]
            items.append({"meta_info": {"input_token_logprobs": token, "input_top_logprobs": top}})
        return items


class ScoringLaunch:
    """Answers measure_mode's calls without a server, counting them; the plain server's
    outputs are `plain`, the speculative server's `spec`; `while_up` gets `client`."""

    def __init__(
        self,
        spec: tuple[tuple[int, ...], ...],
        plain: tuple[tuple[int, ...], ...] = PLAIN_OUTPUTS,
        client: ScoringClient | None = None,
    ) -> None:
        self.outputs = {"spec": spec, "plain": plain}
        self.client = client or ScoringClient()
        self.calls: list[str] = []

    def __call__(self, scenario: Scenario, mode: str, folder: Path, **kwargs: Any) -> ModeResult:
        self.calls.append(mode)
        result = replace(mode_result(mode, 100.0), outputs=self.outputs[mode])
        while_up = kwargs.get("while_up")
        if while_up is not None:
            while_up(self.client, result.outputs)
        return result


class CountingScore:
    """The pair's `score` seam: counts the plain servers it would launch, scoring nothing."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, scenario: Scenario, plain: ModeResult, spec: ModeResult, *args: Any) -> Any:
        self.calls += 1
        return None


@pytest.fixture
def tiny(tmp_path: Path) -> Scenario:
    return load_config(write_config(tmp_path)).scenarios["tiny"]


def test_a_fresh_plain_twin_scores_parted_outputs_before_it_stops(
    tiny: Scenario, tmp_path: Path
) -> None:
    launch, score = ScoringLaunch(PARTED_OUTPUTS), CountingScore()
    servers = ServerPair("cpu", launch=launch, score=score)
    measurement = servers.measure(tiny, tmp_path / "run")
    assert launch.calls == ["spec", "plain"] and score.calls == 0
    # Only the parted prompt is scored: its prompt, then prompt + speculative output.
    first, forced = launch.client.bodies
    assert first["text"] == [tiny.prompts[1]]
    assert forced["input_ids"] == [[7, 8, 4, 9, 9]]
    report = measurement.equivalence
    assert report.checked_share == 1.0 and report.prompts[1].forced
    assert report.summary().endswith("100% of tokens compared")


def test_identical_outputs_make_no_scoring_request(tiny: Scenario, tmp_path: Path) -> None:
    launch, score = ScoringLaunch(PLAIN_OUTPUTS), CountingScore()
    measurement = ServerPair("cpu", launch=launch, score=score).measure(tiny, tmp_path / "run")
    assert launch.calls == ["spec", "plain"] and score.calls == 0
    assert launch.client.bodies == []
    assert measurement.equivalence.summary() == "2/2 prompts token-identical"


def test_a_scenario_that_only_reports_equivalence_is_not_scored(
    tiny: Scenario, tmp_path: Path
) -> None:
    launch, score = ScoringLaunch(PARTED_OUTPUTS), CountingScore()
    reported = replace(tiny, equivalence="report")
    ServerPair("cpu", launch=launch, score=score).measure(reported, tmp_path / "run")
    assert launch.client.bodies == [] and score.calls == 0


def test_reused_plain_figures_score_through_one_more_plain_launch(
    tiny: Scenario, tmp_path: Path
) -> None:
    launch, score = ScoringLaunch(PARTED_OUTPUTS), CountingScore()
    reused = replace(mode_result("plain", 99.0), outputs=PLAIN_OUTPUTS, reused_from=3)
    servers = ServerPair("cpu", launch=launch, score=score, plain_source=lambda s, c: reused)
    measurement = servers.measure(tiny, tmp_path / "run")
    assert launch.calls == ["spec"] and score.calls == 1
    assert launch.client.bodies == [] and measurement.plain.reused_from == 3


def test_a_plain_twin_measured_first_scores_through_one_more_launch(
    tiny: Scenario, tmp_path: Path
) -> None:
    # The gate suites time the plain twin first: the speculative outputs are not known yet.
    launch, score = ScoringLaunch(PARTED_OUTPUTS), CountingScore()
    servers = ServerPair("cpu", launch=launch, score=score)
    servers.server(tiny, "plain", tmp_path / "run")
    servers.server(tiny, "spec", tmp_path / "run")
    servers.measure(tiny, tmp_path / "run")
    assert launch.calls == ["plain", "spec"] and score.calls == 1
    assert launch.client.bodies == []


def test_an_engine_that_refuses_input_logprobs_leaves_the_first_divergence_rule(
    tiny: Scenario, tmp_path: Path
) -> None:
    launch = ScoringLaunch(PARTED_OUTPUTS, client=ScoringClient(refuse=True))
    score = CountingScore()
    measurement = ServerPair("cpu", launch=launch, score=score).measure(tiny, tmp_path / "run")
    assert len(launch.client.bodies) == 1 and score.calls == 0
    assert measurement.equivalence.checked_share < 1.0


def test_a_scoring_failure_keeps_the_plain_figures_and_fails_the_join(
    tiny: Scenario, tmp_path: Path
) -> None:
    launch = ScoringLaunch(PARTED_OUTPUTS, client=ScoringClient(garble=True))
    servers = ServerPair("cpu", launch=launch, score=CountingScore())
    folder = tmp_path / "run"
    servers.server(tiny, "spec", folder)
    plain = servers.server(tiny, "plain", folder)
    assert plain.outputs == PLAIN_OUTPUTS and servers.measured(folder) == ("spec", "plain")
    with pytest.raises(InfrastructureError, match="teacher forcing: the server scored token"):
        servers.measure(tiny, folder)
    assert launch.calls == ["spec", "plain"]
