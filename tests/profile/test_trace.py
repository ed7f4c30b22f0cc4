"""Reading a profiler trace: work charged to the innermost phase range, by category."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from perfgate.errors import InfrastructureError
from perfgate.profile.trace import (
    CPU_OPS,
    GPU_KERNELS,
    PhaseLookup,
    Span,
    load_trace,
    parse_spans,
    phase_breakdown,
)


def event(name: str, cat: str, ts: float, dur: float, **extra: Any) -> dict[str, Any]:
    args = {"correlation": extra.pop("correlation")} if "correlation" in extra else {}
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": args, **extra}  # fmt: skip


def ranges() -> list[dict[str, Any]]:
    return [
        event("cycle", "user_annotation", 0, 100),
        event("draft", "user_annotation", 10, 20),
        event("verify", "user_annotation", 40, 50),
    ]


def test_cpu_operators_count_their_self_time_once() -> None:
    ops = [
        event("aten::linear", "cpu_op", 12, 16),
        event("aten::addmm", "cpu_op", 13, 14),  # inside linear
        event("aten::scaled_dot_product_attention", "cpu_op", 45, 25),
        event("aten::bmm", "cpu_op", 46, 10),  # inside the attention: attention's work
        event("aten::_softmax", "cpu_op", 57, 3),
        event("aten::add", "cpu_op", 92, 3),  # in the cycle, in no named phase
        event("aten::zeros", "cpu_op", 150, 10),  # outside every cycle
    ]
    breakdown = phase_breakdown(parse_spans([*ranges(), *ops]))
    assert breakdown.source == CPU_OPS and breakdown.cycles == 1
    assert breakdown.us["draft"]["matmul"] == pytest.approx(16)
    assert breakdown.us["verify"]["attention"] == pytest.approx(25)
    assert breakdown.us["verify"]["matmul"] == 0
    assert breakdown.us["other"]["other"] == pytest.approx(3)
    assert breakdown.unattributed_us == pytest.approx(10)
    assert breakdown.counts == {"draft": 2, "verify": 3, "other": 1}


def test_kernels_belong_to_the_phase_that_launched_them() -> None:
    gpu = {"pid": 0, "tid": 7}
    spans = [
        *ranges(),
        event("cudaGraphLaunch", "cuda_runtime", 50, 2, correlation=7),
        event("nvjet_tst_128x64", "kernel", 200, 30, correlation=7, **gpu),
        event("flash_fwd_kernel", "kernel", 230, 10, correlation=7, **gpu),
        event("cudaMemcpyAsync", "cuda_runtime", 95, 1, correlation=8),
        event("Memcpy DtoH", "gpu_memcpy", 240, 4, correlation=8, **gpu),
        # No launch in the trace: the GPU-side copy of the ranges decides.
        event("draft", "gpu_user_annotation", 300, 100, **gpu),
        event("elementwise_kernel", "kernel", 310, 10, correlation=99, **gpu),
        event("elementwise_kernel", "kernel", 500, 5, correlation=98, **gpu),  # nowhere
        event("aten::mm", "cpu_op", 41, 5),  # CPU ops do not count when kernels are there
    ]
    breakdown = phase_breakdown(parse_spans(spans))
    assert breakdown.source == GPU_KERNELS
    assert breakdown.us["verify"]["matmul"] == pytest.approx(30)
    assert breakdown.us["verify"]["attention"] == pytest.approx(10)
    assert breakdown.us["other"]["other"] == pytest.approx(4)
    assert breakdown.us["draft"]["other"] == pytest.approx(10)
    assert breakdown.unattributed_us == pytest.approx(5)
    # What each category is made of, longest first.
    assert breakdown.top("verify", 5) == [
        ("nvjet_tst_128x64", "matmul", 30.0),
        ("flash_fwd_kernel", "attention", 10.0),
    ]


def test_the_profile_table_names_the_focus_phase_s_longest_kernels() -> None:
    from perfgate.profile.render import phase_table, render_markdown

    spans = [
        *ranges(),
        event("cudaLaunchKernel", "cuda_runtime", 50, 2, correlation=7),
        event("nvjet_tst_128x64", "kernel", 200, 30, correlation=7, pid=0, tid=7),
        event("cudaLaunchKernel", "cuda_runtime", 52, 2, correlation=8),
        event("void at::native::elementwise_kernel<a|b>", "kernel", 230, 40, correlation=8),
    ]
    phases = phase_table(phase_breakdown(parse_spans(spans)))
    report = {
        "scenario": "s", "mode": "spec", "device_name": "GPU", "source": GPU_KERNELS,
        "cycles": 1, "categories": ["matmul", "attention", "communication", "other"],
        "phases": phases, "unattributed_ms": 0.0, "coverage": None, "trace": "t.json.gz",
        "command": "server", "overhead": {"change": None},
    }  # fmt: skip
    text = render_markdown(report)
    top = text.split("The kernels that took longest in verify:")[1].splitlines()
    assert top[4] == "| 0.040 | other | `void at::native::elementwise_kernel<a\\|b>` |"
    assert top[5] == "| 0.030 | matmul | `nvjet_tst_128x64` |"


def span(name: str, start: float, dur: float) -> Span:
    return Span(name, "user_annotation", 1, 1, start, dur)


@pytest.mark.parametrize(
    ("moment", "phase"),
    [(5, "other"), (10, "draft"), (29, "draft"), (35, "other"), (45, "verify"), (100, "other"),
     (101, None), (120, "prefill"), (-1, None)],
)  # fmt: skip
def test_the_innermost_range_names_the_phase(moment: float, phase: str | None) -> None:
    lookup = PhaseLookup([span("cycle", 0, 100), span("draft", 10, 20), span("verify", 40, 50),
                          span("prefill", 110, 20)])  # fmt: skip
    assert lookup.phase_at(1, 1, moment) == phase
    assert lookup.phase_at(1, 2, moment) is None  # another thread has no ranges


def test_a_range_never_outlives_the_one_around_it() -> None:
    lookup = PhaseLookup([span("cycle", 0, 50), span("verify", 40, 30)])
    assert lookup.phase_at(1, 1, 45) == "verify"
    assert lookup.phase_at(1, 1, 60) is None


def test_a_real_torch_profiler_trace_is_read(tmp_path: Path) -> None:
    weights = torch.randn(64, 64)
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    profiler.start()
    for _ in range(2):
        with (
            torch.profiler.record_function("cycle"),
            torch.profiler.record_function("verify"),
        ):
            torch.nn.functional.linear(torch.randn(8, 64), weights).relu()
    profiler.stop()
    path = tmp_path / "trace.json"
    profiler.export_chrome_trace(str(path))
    breakdown = phase_breakdown(parse_spans(load_trace(path)))
    assert breakdown.cycles == 2 and breakdown.source == CPU_OPS
    assert breakdown.us["verify"]["matmul"] > 0 and breakdown.us["verify"]["other"] > 0


def test_gzipped_and_bare_traces_load(tmp_path: Path) -> None:
    events = ranges()
    with gzip.open(tmp_path / "t.json.gz", "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    (tmp_path / "t.json").write_text(json.dumps(events))  # the bare-list form
    assert load_trace(tmp_path / "t.json.gz") == events == load_trace(tmp_path / "t.json")


@pytest.mark.parametrize("content", [None, "{not json", '{"traceEvents": 3}'])
def test_an_unreadable_trace_is_an_infrastructure_error(
    tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InfrastructureError, match=str(path)):
        load_trace(path)


def test_the_table_says_how_busy_the_device_was_inside_each_probed_phase() -> None:
    from perfgate.profile.render import busy, render_markdown

    phases = {
        "draft": {"ms_per_cycle": {"matmul": 0.2, "other": 0.1}, "total_ms_per_cycle": 0.3,
                  "count": 4, "top": []},
        "draft_extend": {"ms_per_cycle": {"matmul": 0.1, "other": 0.1},
                         "total_ms_per_cycle": 0.2, "count": 2, "top": []},
        "other": {"ms_per_cycle": {"matmul": 0.0, "other": 0.05}, "total_ms_per_cycle": 0.05,
                  "count": 1, "top": []},
    }  # fmt: skip
    shares = busy(phases, {"cycle": 2.0, "draft": 0.3125, "draft_extend": 0.8})
    assert shares == {"draft": {"window_ms": 0.3125, "share": 0.96},
                      "draft_extend": {"window_ms": 0.8, "share": 0.25}}  # fmt: skip
    report = {
        "scenario": "s", "mode": "spec", "device_name": "GPU", "source": GPU_KERNELS,
        "cycles": 1, "categories": ["matmul", "other"], "phases": phases, "busy": shares,
        "unattributed_ms": 0.0, "coverage": None, "trace": "t.json.gz", "command": "server",
        "overhead": {"change": None},
    }  # fmt: skip
    rows = {line.split(" |")[0]: line for line in render_markdown(report).splitlines()}
    assert rows["| draft_extend"].endswith("| 0.200 | 2 | 0.800 | 25% |")
    assert rows["| other"].endswith("| 0.050 | 1 | - | - |")
