"""A serving scenario end to end: a run under a request rate, its latency percentiles recorded,
judged, stored and charted."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from perfgate.serving.figures import SERVING_METRICS

from ..conftest import HERE_PROFILE, TINY_SCENARIO, run_perfgate, verdict_table, write_config
from ..in_process import perfgate_main

pytestmark = pytest.mark.slow

# Each server's load is sent once per timed repeat: two are the fewest that show a spread
# within a run (a third would only add a load to each server of both runs).
REPEATS = 2

# The tiny scenario with a serving load: 8 streamed requests at 20 per second, at most 4 in
# flight, output lengths from 8 to 16 tokens, and the serving metrics gated. Its timed repeats
# of the two prompts (before the loads) generate 8 tokens, not 24: the checks below read the
# loads' figures.
SERVING_SCENARIO = (
    TINY_SCENARIO.replace("repeats = 3", f"repeats = {REPEATS}")
    .replace("max_new_tokens = 24", "max_new_tokens = 8")
    .replace(
        "[scenarios.tiny.tolerances]",
        'gated = ["output_tok_s", "accept_length", "serving_output_tok_s", "ttft_ms_p50", '
        '"ttft_ms_p99", "itl_ms_p50", "itl_ms_p99"]\n\n[scenarios.tiny.tolerances]',
    )
    + """
ttft_ms_p50 = 0.9
ttft_ms_p99 = 0.9
itl_ms_p50 = 0.9
itl_ms_p99 = 0.9
serving_output_tok_s = 0.9

[scenarios.tiny.serving]
request_rate = 20.0
max_concurrency = 4
num_prompts = 8
output_len = 16
range_ratio = 0.5
cross_check = "off"
"""
)
assert f"repeats = {REPEATS}" in SERVING_SCENARIO and "max_new_tokens = 8" in SERVING_SCENARIO


def test_a_serving_run_records_judges_and_charts_its_latency_percentiles(tmp_path: Path) -> None:
    write_config(tmp_path, SERVING_SCENARIO)
    first = run_perfgate("run", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_perfgate("run", cwd=tmp_path)
    assert second.returncode in (0, 1, 75), second.stdout + second.stderr  # timings decide
    assert "judged against 1 earlier run" in " ".join(second.stdout.split()), second.stdout

    with sqlite3.connect(tmp_path / "history.db") as db:
        runs, newest = db.execute("SELECT count(*), max(id) FROM runs").fetchone()
        rows = db.execute(
            "SELECT mode, metric, value FROM samples WHERE run_id = 1 AND metric IN "
            f"({', '.join('?' * len(SERVING_METRICS))})",
            SERVING_METRICS,
        ).fetchall()
    by_metric: dict[tuple[str, str], list[float]] = {}
    for mode, metric, value in rows:
        by_metric.setdefault((mode, metric), []).append(value)
    for mode in ("spec", "plain"):
        for metric in SERVING_METRICS:
            values = by_metric[(mode, metric)]
            assert len(values) == REPEATS and all(v > 0 for v in values)  # one per repeat
        p50, p99 = by_metric[(mode, "ttft_ms_p50")], by_metric[(mode, "ttft_ms_p99")]
        assert all(low <= high for low, high in zip(p50, p99, strict=True))

    # The last run's verdicts, as the history keeps them; the table printed last shows the same.
    last = perfgate_main("history", "show", str(newest), "--json", cwd=tmp_path)
    assert last.returncode == 0, last.stderr
    verdicts = {v["metric"]: v["status"] for v in json.loads(last.stdout)["verdicts"]}
    for metric in SERVING_METRICS:
        assert verdicts.get(metric) in ("pass", "regression", "improvement", "inconclusive")
    assert verdict_table(second.stdout) == verdicts, second.stdout

    report = (tmp_path / "reports" / "index.html").read_text()
    payload = json.loads(report.split('id="perfgate-data">')[1].split("</script>")[0])
    group = next(g for g in payload["groups"] if g["scenario"] == "tiny")
    for metric in SERVING_METRICS:
        assert len(group["series"][f"spec.{metric}"]) == runs >= 2  # every run, in one chart
        assert f"plain.{metric}" in group["series"]
    assert HERE_PROFILE in report
