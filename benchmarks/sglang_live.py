"""The pieces of benchmarks/sglang_live.sh that are easier in Python than in the shell.

    python benchmarks/sglang_live.py capture FILE -- COMMAND...  # its output also to FILE
    python benchmarks/sglang_live.py versions FILE.json [--graphs]  # what imports, which version
    python benchmarks/sglang_live.py variants CONFIG OUT --bad-draft DIR  # + five variants
    python benchmarks/sglang_live.py bad-draft SRC OUT           # the draft, 256 wide in config
    python benchmarks/sglang_live.py broken-draft SRC OUT        # its fc weight cut in width
    python benchmarks/sglang_live.py history DB SCENARIO FILE    # `perfgate history show`
    python benchmarks/sglang_live.py runs DB                     # runs the history holds
    python benchmarks/sglang_live.py record STATE OUT.md         # the record, from the pieces

Needs only the standard library, except `versions` (what it checks) and `history` (perfgate).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sqlite3
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SCENARIO = "sglang-tiny-eagle3"
# Checked in this order; the first three must import for the run to go on.
MODULES = ("sglang", "sgl_kernel", "flashinfer", "torch", "transformers", "tokenizers",
           "triton", "xgrammar", "perfgate")  # fmt: skip
REQUIRED = MODULES[:3]
# What CUDA graphs add (benchmarks/sglang_stage.py GRAPH_WHEELS), checked once they are staged.
GRAPH_MODULES = ("deep_gemm", "cutlass", "google.protobuf")
# `versions`' sets: the modules checked, and those of them that must import (exit 1 if not).
# The graph set's imports are a record, none required: the graphs run says whether SGLang
# needed them (on the H200 cutlass did not import from the staged folder, whose .pth files
# are not read from PYTHONPATH, and the run passed without it).
VERSION_SETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "base": (MODULES, REQUIRED),
    "graphs": (GRAPH_MODULES, ()),
}
EAGER_FLAG = "--disable-cuda-graph"
DISTRIBUTIONS = {"sgl_kernel": "sglang-kernel", "flashinfer": "flashinfer-python",
                 "deep_gemm": "sgl-deep-gemm", "cutlass": "nvidia-cutlass-dsl",
                 "google.protobuf": "protobuf"}  # fmt: skip


def capture(path: Path, command: Sequence[str]) -> int:
    """Run command; its output (stdout and stderr, interleaved) goes to stdout and to path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
        return process.wait()


def versions(modules: Sequence[str] = MODULES) -> dict[str, str]:
    """Each module's version, or the exception that stopped its import."""
    from importlib import metadata

    found: dict[str, str] = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as error:  # the record names whatever stopped it
            found[name] = f"import failed: {type(error).__name__}: {error}"
            continue
        version = getattr(module, "__version__", None)
        try:
            version = version or metadata.version(DISTRIBUTIONS.get(name, name))
        except metadata.PackageNotFoundError:
            version = version or "?"
        found[name] = f"{version} ({Path(str(getattr(module, '__file__', ''))).parent})"
    try:
        import torch

        found["cuda"] = f"{torch.version.cuda}, {torch.cuda.get_device_name(0)}"
    except Exception as error:
        found["cuda"] = f"unavailable: {error}"
    return found


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML here")


def _table(name: str, raw: Mapping[str, Any]) -> list[str]:
    lines = [f"[scenarios.{name}]"]
    lines += [f"{k} = {_toml(v)}" for k, v in raw.items() if not isinstance(v, dict)]
    for key, sub in raw.items():
        if isinstance(sub, dict):
            lines += [f"[scenarios.{name}.{key}]", *(f"{k} = {_toml(v)}" for k, v in sub.items())]
    return [*lines, ""]


def variants(config: Path, out: Path, bad_draft: Path, broken_draft: Path) -> list[str]:
    """Write config's text to out with five variants of the scenario after it: with SGLang's
    device timer (-metrics), under a serving load that SGLang's benchmark cross-checks
    (-serving), with a draft whose config does not fit the target (-bad), with a draft
    whose config fits but whose weights do not (-broken), and with CUDA graphs on both twins
    (-graphs: `--disable-cuda-graph` left out); return their names."""
    raw = tomllib.loads(config.read_text())["scenarios"][SCENARIO]
    eager = raw.get("extra_args", [])
    if EAGER_FLAG not in eager:
        raise SystemExit(f"{config}: [scenarios.{SCENARIO}] extra_args lacks {EAGER_FLAG}")
    serving = {"request_rate": "inf", "max_concurrency": 8, "num_prompts": 32, "input_len": 64,
               "output_len": 128, "cross_check": "sglang"}  # fmt: skip
    tables = {
        f"{SCENARIO}-metrics": raw | {"engine_metrics": True},
        f"{SCENARIO}-serving": raw | {"serving": serving},
        f"{SCENARIO}-bad": raw | {"draft": str(bad_draft)},
        f"{SCENARIO}-broken": raw | {"draft": str(broken_draft)},
        f"{SCENARIO}-graphs": raw | {"extra_args": [a for a in eager if a != EAGER_FLAG]},
    }
    lines = [config.read_text().rstrip("\n"), ""]
    for name, table in tables.items():
        lines += _table(name, table)
    out.write_text("\n".join(lines))
    return list(tables)


def bad_draft(source: Path, out: Path, width: int = 256) -> Path:
    """A copy of the exported draft whose config says it reads hidden states `width` wide:
    perfgate's preflight refuses it, and SGLang, launched with it, refuses its weights."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(config | {"target_hidden_size": width}, indent=2))
    return out


def broken_draft(source: Path, out: Path) -> Path:
    """A copy of the exported draft whose fc weight lost a third of its columns: the config
    passes perfgate's preflight, and SGLang dies loading the weights."""
    from safetensors.torch import load_file, save_file

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(source, out)
    tensors = load_file(str(out / "model.safetensors"))
    fc = tensors["fc.weight"]
    tensors["fc.weight"] = fc[:, : fc.shape[1] * 2 // 3].contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def runs(db: Path) -> int:
    if not db.is_file():
        return 0
    with sqlite3.connect(db) as connection:
        return int(connection.execute("SELECT count(*) FROM runs").fetchone()[0])


def history(db: Path, scenario: str, out: Path) -> int:
    """Write `perfgate history show` of the newest run of scenario to out; return its id."""
    with sqlite3.connect(db) as connection:
        row = connection.execute(
            "SELECT max(id) FROM runs WHERE scenario = ?", (scenario,)
        ).fetchone()
    if row is None or row[0] is None:
        raise SystemExit(f"{db}: no run of {scenario}")
    shown = subprocess.run(
        [sys.executable, "-m", "perfgate", "history", "show", str(row[0]), "--db",
         f"sqlite:///{db}"], capture_output=True, text=True, check=True,
    )  # fmt: skip
    out.write_text(shown.stdout)
    return int(row[0])


# --- the record ------------------------------------------------------------------------------

# (file under STATE/record, the section's title, what it shows), in the record's order.
SECTIONS = (
    ("versions.json", "What ran", "the versions that imported, from the staged install"),
    ("commands.txt", "The twin command lines", "`perfgate servers --dry-run`, as launched"),
    ("reference.txt", "First run: the local reference", "`perfgate run`, exit 0 expected"),
    ("reference-run.txt", "First run, as recorded", "`perfgate history show`"),
    ("judged.txt", "Second run: judged against the first", "`perfgate run`, exit 0 expected"),
    ("judged-run.txt", "Second run, as recorded", "phases, equivalence, accept length, tok/s"),
    ("overhead.md", "The probe's cost inside SGLang", "benchmarks/probe_overhead.py, launches"),
    ("metrics-run.txt", "SGLang's device timer beside the probe", "`engine_metrics = true`"),
    ("serving-run.txt", "Serving load: perfgate's figures and SGLang's benchmark",
     "`[serving]` with `cross_check = \"sglang\"`"),
    ("one-batch-spec.txt", "sglang.bench_one_batch_server, EAGLE-3 server", "its own output"),
    ("one-batch-plain.txt", "sglang.bench_one_batch_server, plain server", "its own output"),
    ("serving-spec.txt", "sglang.benchmark.serving, EAGLE-3 server", "its own output"),
    ("serving-plain.txt", "sglang.benchmark.serving, plain server", "its own output"),
    ("bad-preflight.txt", "Bad input: a draft 256 wide, refused by perfgate", "exit 64"),
    ("bad-runs.txt", "Bad input: nothing recorded", "runs in the history before and after"),
    ("bad-sglang.txt", "Bad input: the same draft given to SGLang itself", "its own message"),
    ("bad-loading.txt", "Bad input: a draft SGLang dies loading, under perfgate",
     "exit 64 or 69 with SGLang's message, nothing recorded"),
    ("graphs-versions.json", "CUDA graphs: what the graph set added",
     "the versions that imported, from the staged graph wheels"),
    ("graphs.txt", "CUDA graphs on both twins", "`perfgate run --no-gate`, exit 0 expected"),
    ("graphs-run.txt", "CUDA graphs, as recorded", "phases, equivalence, accept length, tok/s"),
    ("graphs-closure.md", "CUDA graphs: the import closure of the launch",
     "benchmarks/sglang_closure.py, with the graph set installed"),
    ("series.txt", "CUDA graphs: the latest of the series of launches",
     "`perfgate run --no-gate` of the graphs variant, exit 0 expected"),
    ("graphs-noise.md", "CUDA graphs: the spread between launches",
     "benchmarks/launch_noise.py over every graphs launch"),
    ("gap-spec.txt", "Serving clients side by side, EAGLE-3 server with graphs",
     "benchmarks/serving_client_gap.py --base-url: each client's tok/s over SGLang's"),
    ("gap-plain.txt", "Serving clients side by side, plain server with graphs",
     "benchmarks/serving_client_gap.py --base-url: each client's tok/s over SGLang's"),
    ("closure.md", "The import closure of the launch", "benchmarks/sglang_closure.py"),
)  # fmt: skip
TAIL_LINES = 80  # of a long output, the record keeps the end


def _shown(text: str, fence: bool) -> str:
    lines = text.rstrip("\n").splitlines()
    if len(lines) > TAIL_LINES:
        lines = [f"... ({len(lines) - TAIL_LINES} lines before)", *lines[-TAIL_LINES:]]
    body = "\n".join(lines)
    return f"```\n{body}\n```" if fence else body


def record(state: Path, out: Path, hidden: Mapping[str, str]) -> str:
    """The record: the steps with their exit codes, then each piece found under state/record
    (a missing one says so), with this machine's folders written as names (hidden)."""
    pieces = state / "record"
    parts = [(state / "summary.md").read_text() if (state / "summary.md").is_file() else ""]
    for file, title, what in SECTIONS:
        path = pieces / file
        parts.append(f"## {title}\n\n{what}.\n")
        if not path.is_file():
            parts.append("Not run: see the steps above.\n")
            continue
        text = path.read_text(errors="replace")
        parts.append(_shown(text, fence=not file.endswith(".md")) + "\n")
    text = "\n".join(parts)
    for folder, name in hidden.items():
        text = text.replace(folder, name)
    out.write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["capture"]:
        if len(argv) < 4 or argv[2] != "--":
            raise SystemExit("usage: capture FILE -- COMMAND...")
        return capture(Path(argv[1]), argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    checked = actions.add_parser("versions")
    checked.add_argument("out", type=Path)
    checked.add_argument("--graphs", action="store_true", help="what CUDA graphs add")
    variant = actions.add_parser("variants")
    variant.add_argument("config", type=Path)
    variant.add_argument("out", type=Path)
    variant.add_argument("--bad-draft", type=Path, required=True)
    variant.add_argument("--broken-draft", type=Path, required=True)
    for name in ("bad-draft", "broken-draft"):
        bad = actions.add_parser(name)
        bad.add_argument("source", type=Path)
        bad.add_argument("out", type=Path)
    shown = actions.add_parser("history")
    shown.add_argument("db", type=Path)
    shown.add_argument("scenario")
    shown.add_argument("out", type=Path)
    actions.add_parser("runs").add_argument("db", type=Path)
    writer = actions.add_parser("record")
    writer.add_argument("state", type=Path)
    writer.add_argument("out", type=Path)
    writer.add_argument("--hide", action="append", default=[], metavar="FOLDER=NAME")
    args = parser.parse_args(argv)
    if args.action == "versions":
        modules, required = VERSION_SETS["graphs" if args.graphs else "base"]
        found = versions(modules)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(found, indent=1) + "\n")
        for name, version in found.items():
            print(f"{name}: {version}")
        return 1 if any(found[m].startswith("import failed") for m in required) else 0
    if args.action == "variants":
        print("\n".join(variants(args.config, args.out, args.bad_draft, args.broken_draft)))
    elif args.action == "bad-draft":
        print(bad_draft(args.source, args.out))
    elif args.action == "broken-draft":
        print(broken_draft(args.source, args.out))
    elif args.action == "history":
        print(history(args.db, args.scenario, args.out))
    elif args.action == "runs":
        print(runs(args.db))
    else:
        hidden = dict(pair.split("=", 1) for pair in args.hide)
        record(args.state, args.out, hidden)
        print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
