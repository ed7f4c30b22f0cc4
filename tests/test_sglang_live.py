"""benchmarks/sglang_live.sh and its helpers, the live SGLang run for an H200: what of it runs
without a GPU. The script's stages are listed in a dry run; the staging packs wheels into parts
and installs them back; the kernel's wheel loses what a Hopper GPU never loads; the import hook
records every process's imports; the record is written from what the stages left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO
from .hang import HANG_S

SCRIPT = REPO / "benchmarks" / "sglang_live.sh"
sys.path.insert(0, str(REPO / "benchmarks"))
import sglang_closure  # noqa: E402
import sglang_live  # noqa: E402
import sglang_stage  # noqa: E402


def _script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "STATE": str(tmp_path / "state"),
           "WORK": str(tmp_path / "work"), "STAGED": str(tmp_path / "staged")}  # fmt: skip
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False, timeout=HANG_S
    )


def test_an_unknown_stage_exits_64_naming_the_stages(tmp_path: Path) -> None:
    done = _script(tmp_path, str(tmp_path / "out"), "launch")
    assert done.returncode == 64
    assert "unknown stage 'launch'; stages are receive, install, export" in done.stderr


def test_a_dry_run_says_every_step_and_runs_none(tmp_path: Path) -> None:
    done = _script(tmp_path, "--dry-run", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("== would run")]
    names = [line.split(" (expect")[0].removeprefix("== would run ") for line in steps]
    assert names[:3] == ["install", "versions", "export llama-tiny"]  # receive: not by default
    for name in ("reference run", "judged run", "probe overhead", "engine metrics run",
                 "bench_one_batch_server (spec)", "benchmark.serving (plain)",
                 "bad input: perfgate's preflight", "bad input: SGLang itself",
                 "graphs launch", "graphs launches' noise",
                 "serving clients side by side (spec)", "serving clients side by side (plain)",
                 "record"):  # fmt: skip
        assert name in names, name
    assert "--scenario sglang-tiny-eagle3" in done.stdout
    assert not (tmp_path / "state" / "history.db").exists()
    assert (tmp_path / "out" / "run.log").is_file() and (tmp_path / "out" / "summary.md").is_file()


def _wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    """A minimal pure-Python wheel of `name` 1.0 holding files."""
    dist = f"{name}-1.0.dist-info"
    path = folder / f"{name}-1.0-py3-none-any.whl"
    rows = [*files, f"{dist}/METADATA", f"{dist}/WHEEL", f"{dist}/RECORD"]
    with zipfile.ZipFile(path, "w") as wheel:
        for file, text in files.items():
            wheel.writestr(file, text)
        wheel.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        wheel.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{dist}/RECORD", "".join(f"{row},,\n" for row in rows))
    return path


def test_the_kernel_wheel_loses_only_what_hopper_never_loads(tmp_path: Path) -> None:
    files = {name: "x" for name in ("sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so",
             "sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/flash_ops.abi3.so",
             "sgl_kernel/flashmla_ops.abi3.so", "sgl_kernel/infllm_ops.cpython-310.so")}  # fmt: skip
    source = _wheel(tmp_path, "sglang_kernel", files)
    trimmed = tmp_path / "out.whl"
    left_out = sglang_stage.trim_kernel(source, trimmed)
    assert sorted(left_out) == sorted(f for f in files if "sm90" not in f and "__init__" not in f)
    with zipfile.ZipFile(trimmed) as wheel:
        kept = set(wheel.namelist())
        record = wheel.read("sglang_kernel-1.0.dist-info/RECORD").decode()
    assert {"sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so"} <= kept
    assert not kept & set(left_out) and not any(name in record for name in left_out)


def test_the_cuda_graph_set_stages_apart_without_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def fake_download(requirement: str, into: Path) -> Path:  # pip, without the network
        asked.append(requirement)
        name, version = requirement.split("==")
        into.mkdir(parents=True, exist_ok=True)
        return _wheel(into, name.replace("-", "_"), {f"{name}.txt": version})

    monkeypatch.setattr(sglang_stage, "pip_download", fake_download)
    sglang_stage.main(["download", "--set", "graphs", "--dest", str(tmp_path / "graphs")])
    assert asked == list(sglang_stage.GRAPH_WHEELS)
    assert not set(asked) & set(sglang_stage.WHEELS)  # only what the live set lacks
    report = json.loads((tmp_path / "graphs" / "stage.json").read_text())
    assert len(report["wheels"]) == len(asked) and report["kernel_wheel_bytes"] == 0
    # Without --dest, the set's own folder.
    assert sglang_stage.SETS["graphs"].dest == REPO / ".cache" / "sglang-graphs"
    own = sglang_stage.WheelSet(sglang_stage.GRAPH_WHEELS, tmp_path / "own")
    monkeypatch.setitem(sglang_stage.SETS, "graphs", own)
    sglang_stage.main(["download", "--set", "graphs"])
    assert (tmp_path / "own" / "stage.json").is_file()
    with pytest.raises(SystemExit):
        sglang_stage.main(["download", "--set", "nope"])


def test_the_wheels_travel_in_parts_and_install_back(tmp_path: Path) -> None:
    dest = tmp_path / "staged"
    (dest / "wheels").mkdir(parents=True)
    _wheel(dest / "wheels", "alpha", {"alpha/__init__.py": "VALUE = 1\n" + "#" * 300_000})
    _wheel(dest / "wheels", "beta", {"beta/__init__.py": "VALUE = 2\n"})
    manifest = sglang_stage.pack(dest, part_bytes=100_000)
    assert len(manifest["parts"]) == 4 and all(p["bytes"] <= 100_000 for p in manifest["parts"])
    for part in sorted((dest / "parts").iterdir()):
        assert sglang_stage.check_part(part).endswith("whole")
    chunk = sorted((dest / "parts").iterdir())[0] / "chunk"
    good = chunk.read_bytes()
    chunk.write_bytes(b"!" + good[1:])
    with pytest.raises(SystemExit, match="chunk sha256"):
        sglang_stage.check_part(chunk.parent)
    chunk.write_bytes(good)
    site = tmp_path / "site"
    assert sglang_stage.assemble(dest, site) == [w["file"] for w in manifest["wheels"]]
    imported = subprocess.run(
        [sys.executable, "-c", "import alpha, beta; print(alpha.VALUE + beta.VALUE)"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)}, check=True,
    )  # fmt: skip
    assert imported.stdout.strip() == "3"


def test_the_hook_records_the_imports_of_every_process(tmp_path: Path) -> None:
    hook, logs = tmp_path / "hook", tmp_path / "logs"
    sglang_closure.write_hook(hook)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "child_only.py").write_text("VALUE = 1\n")
    (tmp_path / "main.py").write_text(
        "import multiprocessing as mp, json\n"
        "def child():\n    import child_only\n"
        "if __name__ == '__main__':\n"
        "    p = mp.get_context('spawn').Process(target=child); p.start(); p.join()\n"
        "    assert p.exitcode == 0\n"
    )
    env = {**os.environ, sglang_closure.LOG_VARIABLE: str(logs),
           "PYTHONPATH": os.pathsep.join([str(hook), str(tmp_path / "pkg")])}  # fmt: skip
    subprocess.run([sys.executable, "main.py"], env=env, check=True, cwd=tmp_path)
    # The parent's log and its spawned child's, which alone imported child_only.
    logs_with = [p for p in logs.glob("imports-*.tsv") if "child_only" in p.read_text()]
    assert len(list(logs.glob("imports-*.tsv"))) >= 2 and len(logs_with) == 1
    modules = sglang_closure.read_logs(logs)
    assert modules["child_only"] == str(tmp_path / "pkg" / "child_only.py")
    found = sglang_closure.closure(modules, None, path=[str(tmp_path / "pkg")])
    assert found.stdlib_modules > 0 and "json" in modules
    assert any(u.startswith("child_only ") for u in found.unowned)  # no distribution holds it


def test_versions_requires_the_base_set_and_records_the_graph_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`versions` exits 1 when sglang, sgl_kernel or flashinfer fails to import; `versions
    --graphs` exits 0 whatever of the graph set fails to (cutlass did on the H200, and the
    graphs run passed): its imports are written down, the stage expects 0."""
    for name in (*sglang_live.MODULES, *sglang_live.GRAPH_MODULES):
        if name != "perfgate":  # imported here already, and this process's plugin
            monkeypatch.setitem(sys.modules, name, None)  # its import fails
    out = tmp_path / "versions.json"
    assert sglang_live.main(["versions", str(out)]) == 1
    assert json.loads(out.read_text())["sglang"].startswith("import failed: ")
    assert sglang_live.main(["versions", "--graphs", str(out)]) == 0
    found = json.loads(out.read_text())
    assert [name for name in found if name != "cuda"] == list(sglang_live.GRAPH_MODULES)
    assert all(found[name].startswith("import failed") for name in sglang_live.GRAPH_MODULES)
    stage = SCRIPT.read_text().split("stage_graphs() {")[1]
    assert 'run "graph versions" 0 300' in stage


def test_the_variants_add_metrics_serving_and_a_bad_draft(tmp_path: Path) -> None:
    from perfgate.config import load_config

    out = tmp_path / "perfgate.toml"
    names = sglang_live.variants(REPO / "perfgate.toml", out, tmp_path / "bad", tmp_path / "b2")
    config = load_config(out)
    base = config.scenarios["sglang-tiny-eagle3"]
    kinds = ("metrics", "serving", "bad", "broken", "graphs")
    assert names == [f"{base.name}-{v}" for v in kinds]
    assert config.scenarios[names[0]].engine_metrics and not base.engine_metrics
    serving = config.scenarios[names[1]].serving
    assert serving is not None and serving.cross_check == "sglang"
    assert config.scenarios[names[2]].draft == str(tmp_path / "bad")
    assert config.scenarios[names[3]].draft == str(tmp_path / "b2")
    assert config.scenarios[names[2]].tolerances == base.tolerances
    graphs = config.scenarios[names[4]]
    assert "--disable-cuda-graph" in base.extra_args
    assert graphs.extra_args == tuple(a for a in base.extra_args if a != "--disable-cuda-graph")


def test_the_record_names_what_ran_and_what_did_not(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "record").mkdir(parents=True)
    (state / "summary.md").write_text("| step | exit |\n| judged run | 0 |\n")
    (state / "record" / "judged-run.txt").write_text(f"run #2 PASS in {state}/history.db\n")
    (state / "record" / "versions.json").write_text(json.dumps({"sglang": "0.5.16"}))
    text = sglang_live.record(state, tmp_path / "out.md", {str(state): "STATE"})
    assert "| judged run | 0 |" in text and "run #2 PASS in STATE/history.db" in text
    assert str(tmp_path) not in text
    judged = text.index("## Second run, as recorded")
    assert "Not run" not in text[judged : text.index("## The probe's cost")]
    assert (
        "## The probe's cost inside SGLang\n\nbenchmarks/probe_overhead.py, launches.\n\nNot run"
        in text
    )


def test_the_probes_cost_names_the_gpu_an_sglang_server_ran_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SGLang's /server_info has no device name (the H200's record said "on None"): the GPU
    the preflight found names the device in the record."""
    import probe_overhead

    from perfgate.devices import Gpu
    from perfgate.preflight import Preflight
    from perfgate.results import ModeResult

    h200 = Gpu(0, "GPU-0", "NVIDIA H200", "580.159.04", 0.0, 143771.0)
    monkeypatch.setattr(probe_overhead, "preflight", lambda _: Preflight(None, None, (h200,)))

    def measure(*_: object, probe: bool, **__: object) -> ModeResult:
        tok_s = (1000.0,) if probe else (1010.0,)
        return ModeResult("spec", "sglang", {"output_tok_s": tok_s}, (), (), {"version": "0.5.16"})

    monkeypatch.setattr(probe_overhead, "measure_mode", measure)
    rows = probe_overhead.measure_pairs(None, "spec", 2, tmp_path, None)  # type: ignore[arg-type]
    assert [row["device_name"] for row in rows] == ["NVIDIA H200", "NVIDIA H200"]


def test_the_record_stage_writes_the_closure_with_names_not_this_machines_paths(
    tmp_path: Path,
) -> None:
    """The closure names every imported file by its path; OUT's copy, which is committed,
    says `.` for the checkout and STATE for the state folder (it once held the checkout's absolute paths)."""
    record = tmp_path / "state" / "record"
    record.mkdir(parents=True)
    closure = {
        "files": [f"perfgate {REPO}/perfgate/__init__.py", f"site {record.parent}/site/x.py"]
    }
    (record / "closure.json").write_text(json.dumps(closure))
    done = _script(tmp_path, str(tmp_path / "out"), "record")
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads((tmp_path / "out" / "closure.json").read_text())
    assert written == {"files": ["perfgate ./perfgate/__init__.py", "site STATE/site/x.py"]}
