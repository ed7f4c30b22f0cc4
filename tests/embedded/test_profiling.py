"""The embedded server's profiler: SGLang's /start_profile body, a window of decode cycles."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from perfgate.config import load_config
from perfgate.engines.embedded.api import GenerateRequest
from perfgate.engines.embedded.batch import RequestError
from perfgate.engines.embedded.engine import Engine
from perfgate.engines.embedded.profiling import ProfileRequest, parse_profile_request
from perfgate.engines.embedded.worker import PlainWorker
from perfgate.engines.launch import free_port, running_server
from perfgate.engines.server_commands import server_command
from perfgate.probe import probe_env
from perfgate.profile.trace import load_trace

from ..conftest import TINY_SCENARIO, write_config
from ..hang import HANG_S
from .common import SpecWorkerFactory


def test_the_request_body_defaults_as_sglang_s() -> None:
    request = parse_profile_request(None, {"SGLANG_TORCH_PROFILER_DIR": "/data/traces"})
    assert request == ProfileRequest(
        output_dir=Path("/data/traces"),
        num_steps=None,
        activities=("CPU", "GPU"),
        with_stack=False,
        record_shapes=False,
        prefix="perfgate-embedded",
    )
    assert parse_profile_request({}, {}).output_dir == Path("/tmp")
    given = parse_profile_request(
        {"output_dir": "/x", "num_steps": 3, "activities": ["CPU"], "merge_profiles": True}, {}
    )
    assert (given.output_dir, given.num_steps, given.activities) == (Path("/x"), 3, ("CPU",))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"start_step": 5}, "'start_step' is not supported"),
        ({"profile_by_stage": True}, "'profile_by_stage' is not supported"),
        ({"activities": ["MEM"]}, "activity 'MEM' is not supported"),
        ({"activities": ["CUDA"]}, "unknown activity 'CUDA'"),
        ({"activities": []}, "activities must be a non-empty list"),
        ({"num_steps": 0}, "num_steps must be an int >= 1"),
        ({"num_steps": True}, "num_steps must be an int >= 1"),
        ({"profile_prefix": "a/b"}, "profile_prefix a name"),
        ([], "the body must be a JSON object"),
    ],
)
def test_a_bad_body_is_refused_naming_the_field(body: object, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        parse_profile_request(body, {})


def generate(engine: Engine, tokens: int = 12) -> None:
    request = GenerateRequest([[1, 2, 3], [4, 5]], [tokens, tokens], ["a", "b"], is_batch=True)
    engine.generate(request, time.perf_counter())


def files(folder: Path) -> tuple[list[Path], list[dict[str, object]]]:
    traces = sorted(folder.glob("*.trace.json"))
    windows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.window.json"))]
    return traces, windows


def test_gpu_alone_on_a_cpu_server_profiles_its_cpu_operators(
    spec_worker: SpecWorkerFactory, tmp_path: Path
) -> None:
    engine = Engine(spec_worker("eagle3", 2))
    body = {"output_dir": str(tmp_path), "num_steps": 1, "activities": ["GPU"]}
    engine.profiler.start(parse_profile_request(body, {}))
    generate(engine)
    traces, windows = files(tmp_path)
    assert windows[0]["activities"] == ["CPU"]
    assert any(e.get("cat") == "cpu_op" for e in load_trace(traces[0]))


def test_a_window_covers_num_steps_decode_cycles(
    spec_worker: SpecWorkerFactory, tmp_path: Path
) -> None:
    engine = Engine(spec_worker("eagle3", 2))
    engine.profiler.start(parse_profile_request({"output_dir": str(tmp_path), "num_steps": 2}))
    assert engine.worker.step_hook is not None and engine.profiler.busy
    generate(engine)
    traces, windows = files(tmp_path)
    assert len(traces) == 1 and windows[0]["cycles"] == 2 and windows[0]["activities"] == ["CPU"]
    assert windows[0]["trace"] == traces[0].name
    assert windows[0]["started_at"] < windows[0]["stopped_at"]
    assert any(e.get("cat") == "cpu_op" for e in load_trace(traces[0]))
    assert engine.worker.step_hook is None and not engine.profiler.busy
    generate(engine)  # nothing more is written once the window closed
    assert len(files(tmp_path)[0]) == 1


def test_a_window_ends_with_its_request(plain: PlainWorker, tmp_path: Path) -> None:
    engine = Engine(plain)
    engine.profiler.start(parse_profile_request({"output_dir": str(tmp_path)}))
    generate(engine, tokens=5)
    _, windows = files(tmp_path)
    assert windows[0]["cycles"] == 4  # the first token comes from the prefill: not a step
    assert plain.step_hook is None


def test_stop_cancels_a_pending_profile_and_refuses_when_idle(
    plain: PlainWorker, tmp_path: Path
) -> None:
    engine = Engine(plain)
    engine.profiler.start(parse_profile_request({"output_dir": str(tmp_path)}))
    with pytest.raises(RequestError, match="already pending or running"):
        engine.profiler.start(parse_profile_request({"output_dir": str(tmp_path)}))
    assert "cancelled" in engine.profiler.stop()
    assert plain.step_hook is None
    with pytest.raises(RequestError, match="not in progress"):
        engine.profiler.stop()
    generate(engine)
    assert files(tmp_path) == ([], [])


def test_stop_asked_mid_window_ends_it_at_the_next_cycle(
    plain: PlainWorker, tmp_path: Path
) -> None:
    engine = Engine(plain)
    engine.profiler.start(parse_profile_request({"output_dir": str(tmp_path)}))
    hook = plain.step_hook
    assert hook is not None
    hook()  # the first cycle opens the window
    assert "Stop profiling" in engine.profiler.stop()
    hook()  # the next one closes it
    _, windows = files(tmp_path)
    assert windows[0]["cycles"] == 1 and plain.step_hook is None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    """A speculative server launched as perfgate launches it, with the probe on."""
    folder = tmp_path_factory.mktemp("profiled")
    scenario = load_config(write_config(folder, TINY_SCENARIO)).scenarios["tiny"]
    env = probe_env(folder / "probe", "embedded", mode="spec")
    command = server_command(scenario, "spec", port=free_port(), extra_env=env)
    with (
        running_server(command, folder / "server.log", 60) as server,
        httpx.Client(base_url=server.base_url, timeout=HANG_S) as client,
    ):
        yield client, folder


@pytest.mark.slow
def test_the_server_writes_a_trace_with_the_phases_marked(
    served: tuple[httpx.Client, Path],
) -> None:
    client, folder = served
    out = folder / "traces"
    body = {"output_dir": str(out), "num_steps": 3, "profile_prefix": "t"}
    assert client.post("/start_profile", json=body).text == "Start profiling.\n"
    assert client.post("/start_profile", json=body).status_code == 400
    sampling = {"temperature": 0, "max_new_tokens": 16}
    assert client.post("/generate", json={"text": "Hello", "sampling_params": sampling}).is_success
    (trace,) = out.glob("t-*-TP-0.trace.json")
    names = [e["name"] for e in load_trace(trace) if e.get("cat") == "user_annotation"]
    assert names.count("cycle") == 3 and names.count("verify") == 3
    assert {"draft", "accept", "draft_extend"} <= set(names) and "prefill" not in names
    stop = client.get("/stop_profile")
    assert stop.status_code == 400 and "not in progress" in stop.text


@pytest.mark.slow
def test_the_server_refuses_a_bad_profile_body(served: tuple[httpx.Client, Path]) -> None:
    client, _ = served
    answer = client.post("/start_profile", json={"activities": ["RPD"]})
    assert answer.status_code == 400 and "'RPD' is not supported" in answer.text
    answer = client.post("/start_profile", content=b"{nope")
    assert answer.status_code == 400 and "not JSON" in answer.text
