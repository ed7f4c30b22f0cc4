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
