"""The serving table, the load it describes, and the metrics of a load. No server."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfgate.config import load_config
from perfgate.errors import ConfigError, ExitCode
from perfgate.preflight import probe_notes
from perfgate.probe.targets import untimed_reason
from perfgate.serving.figures import percentile, summarize_load
from perfgate.serving.generator import LoadRun, RequestTiming
from perfgate.serving.load import ServingLoad, arrival_gaps_s, build_requests
from perfgate.serving.sglang_bench import parse_bench_output

from ..conftest import TINY_SCENARIO, write_config
from ..in_process import perfgate_main


def _config(tmp_path: Path, serving: str, gated: str = "") -> Path:
    text = TINY_SCENARIO.replace(
        "[scenarios.tiny.tolerances]", f"{gated}\n[scenarios.tiny.tolerances]"
    )
    return write_config(tmp_path, text + "\n[scenarios.tiny.serving]\n" + serving)


def test_a_serving_table_becomes_the_scenarios_load(tmp_path: Path) -> None:
    serving = "request_rate = 4\nmax_concurrency = 2\nnum_prompts = 10\ninput_len = 40\n"
    scenario = load_config(_config(tmp_path, serving)).scenarios["tiny"]
    assert scenario.serving == ServingLoad(10, 4.0, 2, 40)
    at_once = load_config(_config(tmp_path, 'request_rate = "inf"\n')).scenarios["tiny"]
    assert at_once.serving is not None and at_once.serving.request_rate is None


@pytest.mark.parametrize(
    ("serving", "gated", "field"),
    [
        ("request_rate = 0\n", "", "scenarios.tiny.serving.request_rate"),
        ('request_rate = "fast"\n', "", "scenarios.tiny.serving.request_rate"),
        ("num_prompts = 0\n", "", "scenarios.tiny.serving.num_prompts"),
        ("range_ratio = 2\n", "", "scenarios.tiny.serving.range_ratio"),
        ('cross_check = "vllm"\n', "", "scenarios.tiny.serving.cross_check"),
        ("rate = 3\n", "", "scenarios.tiny.serving"),
        ('cross_check = "off"\n', 'gated = ["sglang_ttft_ms_p50"]', "scenarios.tiny.gated"),
    ],
)
def test_a_bad_serving_field_is_named_with_its_fix(
    tmp_path: Path, serving: str, gated: str, field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, serving, gated))
    assert caught.value.field == field and caught.value.fix


def test_gating_a_serving_metric_without_a_load_is_bad_input(tmp_path: Path) -> None:
    text = TINY_SCENARIO.replace(
        "[scenarios.tiny.tolerances]", 'gated = ["ttft_ms_p99"]\n[scenarios.tiny.tolerances]'
    )
    write_config(tmp_path, text)
    done = perfgate_main("run", cwd=tmp_path)  # refused before pytest starts
    assert done.returncode == ExitCode.BAD_INPUT
    assert "scenarios.tiny.gated" in done.stderr and "[scenarios.tiny.serving]" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_lengths_and_arrivals_follow_sglangs_random_dataset() -> None:
    load = ServingLoad(
        num_prompts=200, request_rate=5.0, input_len=50, output_len=20, range_ratio=0.5
    )
    requests = build_requests(load, ["abc", "defgh"], 64)
    assert requests == build_requests(load, ["abc", "defgh"], 64)  # seeded: every repeat alike
    assert {len(r.prompt) for r in requests} <= set(range(25, 51))
    assert {r.max_new_tokens for r in requests} == set(range(10, 21))  # int(20 x 0.5)..20
    assert requests[1].prompt.startswith("defghdefgh")
    gaps = arrival_gaps_s(load)
    assert np.mean(gaps) == pytest.approx(1 / 5.0, rel=0.2)
    fixed = build_requests(ServingLoad(num_prompts=3), ["p"], 64)
    assert [(r.prompt, r.max_new_tokens) for r in fixed] == [("p", 64)] * 3
    assert arrival_gaps_s(ServingLoad(num_prompts=3)) == [0.0] * 3


def test_percentiles_are_numpys_and_a_load_becomes_its_metrics() -> None:
    values = [5.0, 1.0, 9.0, 2.0, 7.5]
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert math.isnan(percentile([], 50))
    run = LoadRun(
        (
            RequestTiming(0.010, (0.002, 0.002, 0.004), 4, 0.018),
            RequestTiming(0.030, (0.001,), 2, 0.031),
        ),
        duration_s=0.5,
    )
    metrics = summarize_load(run)
    assert metrics["serving_output_tok_s"] == pytest.approx(12.0)
    assert metrics["ttft_ms_p50"] == pytest.approx(20.0)
    assert metrics["ttft_ms_p99"] == pytest.approx(29.8)
    assert metrics["itl_ms_p50"] == pytest.approx(2.0)
    assert metrics["itl_ms_p99"] == pytest.approx(float(np.percentile([2, 2, 4, 1], 99)))


def test_sglangs_result_line_is_read_for_every_figure() -> None:
    line = (
        '{"completed": 4, "output_throughput": 50.5, "median_ttft_ms": 9.1, "p99_ttft_ms": 15.6,'
        ' "median_itl_ms": 1.8, "p99_itl_ms": 7.4}'
    )
    figures = parse_bench_output("{}\n" + line + "\n", 4)
    assert figures == {
        "sglang_output_tok_s": 50.5,
        "sglang_ttft_ms_p50": 9.1,
        "sglang_ttft_ms_p99": 15.6,
        "sglang_itl_ms_p50": 1.8,
        "sglang_itl_ms_p99": 7.4,
    }


def test_preflight_names_an_algorithm_the_probe_cannot_time(tmp_path: Path) -> None:
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    assert probe_notes(scenario, None) == []
    sglang = replace(scenario, engine="sglang")
    assert probe_notes(sglang, "0.5.23") == []
    (note,) = probe_notes(replace(sglang, algorithm="NGRAM"), "0.5.23")
    assert "no phase table for NGRAM on sglang 0.5.23" in note
    assert "records output tok/s and accept length" in note
    assert "not the phases (draft, verify, draft_extend, accept, cycle)" in note
    multi = replace(sglang, spec_extra_args=("--enable-multi-layer-eagle",))
    (note,) = probe_notes(multi, "0.5.23")
    assert "with --enable-multi-layer-eagle in a worker perfgate has no phase table" in note
    assert untimed_reason("sglang", "0.5.23", "nextn") is None  # NEXTN is EAGLE
    assert untimed_reason("embedded", None, "STANDALONE") is None
