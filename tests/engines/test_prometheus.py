"""SGLang's /metrics: samples, counter deltas, GPU seconds per forward category."""

from __future__ import annotations

from perfgate.engines.prometheus import counter_deltas, device_seconds_by_category, parse_metrics

BEFORE = """\
# HELP sglang:forward_execution_seconds_total Total time that GPU is busy executing model forward passes.
# TYPE sglang:forward_execution_seconds_total counter
sglang:forward_execution_seconds_total{category="target_verify",model_name="m"} 10.0
sglang:forward_execution_seconds_total{category="eagle_draft",model_name="m"} 1.0
sglang:spec_verify_calls_total{model_name="m"} 100.0
sglang:gen_throughput{model_name="m"} 90.5
"""
AFTER = """\
sglang:forward_execution_seconds_total{model_name="m",category="target_verify"} 12.5
sglang:forward_execution_seconds_total{category="eagle_draft",model_name="m"} 1.25
sglang:forward_execution_seconds_total{category="eagle_draft_extend",model_name="m"} 0.5
sglang:spec_verify_calls_total{model_name="m"} 180.0
sglang:gen_throughput{model_name="m"} 95.0
"""


def test_parse_sorts_labels_and_skips_comments() -> None:
    samples = parse_metrics(AFTER)
    assert (
        samples['sglang:forward_execution_seconds_total{category="target_verify",model_name="m"}']
        == 12.5
    )
    assert parse_metrics("# only comments\n\n") == {}


def test_deltas_of_the_counters_perfgate_keeps() -> None:
    deltas = counter_deltas(parse_metrics(BEFORE), parse_metrics(AFTER))
    assert deltas['sglang:spec_verify_calls_total{model_name="m"}'] == 80.0
    assert not any("gen_throughput" in key for key in deltas)  # a gauge, not kept
    assert device_seconds_by_category(deltas) == {
        "target_verify": 2.5,
        "eagle_draft": 0.25,
        "eagle_draft_extend": 0.5,
    }


def test_the_older_counter_name_is_read_too() -> None:
    after = 'sglang:gpu_execution_seconds_total{category="forward_decode"} 3.0\n'
    deltas = counter_deltas({}, parse_metrics(after))
    assert device_seconds_by_category(deltas) == {"forward_decode": 3.0}


def test_the_probe_is_compared_with_the_engine_s_gpu_timer() -> None:
    from perfgate.measure import Repeat, engine_metrics_summary
    from perfgate.probe.reader import CycleRecord

    # Two TP ranks, two cycles each inside the repeat; the engine's counters cover one rank.
    records = [
        CycleRecord(
            "cycle", pid, seq, 100.0 + seq, {"verify": 1250.0, "draft": 150.0, "cycle": 1500.0}
        )
        for pid in (1, 2)
        for seq in (1, 2)
    ] + [CycleRecord("cycle", 1, 9, 500.0, {"verify": 9999.0})]  # outside the repeat
    repeats = [Repeat(started_at=100.0, finished_at=110.0, elapsed_s=10.0, completions=())]
    summary = engine_metrics_summary(parse_metrics(BEFORE), parse_metrics(AFTER), records, repeats)
    assert summary["probe_over_engine.verify"] == 1.0  # 2 x 1250 ms against 2.5 s
    assert summary["probe_over_engine.draft"] == 1.2  # 300 ms against 0.25 s
    assert "probe_over_engine.draft_extend" not in summary  # the probe saw none
    assert summary['sglang:spec_verify_calls_total{model_name="m"}'] == 80.0
    assert engine_metrics_summary(None, None, records, repeats) == {}
