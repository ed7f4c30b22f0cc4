"""perfgate's serving client beside SGLang's ``sglang.benchmark.serving`` on one server: which
of their differences accounts for the gap in output tok/s (issue 30).

    .venv/bin/python benchmarks/serving_client_gap.py --sglang-python PY --mode spec \\
        --rounds 4 --out benchmarks/results/serving-client-gap/spec-c8-r2.json

It starts one embedded server (``perfgate/llama-tiny``, with its EAGLE-3 head under
``--mode spec``; at most 8 running requests, one torch thread) and sends it the serving load of
the H200 record's ``sglang-tiny-eagle3-serving`` (32 requests, all at once, at most 8 in
flight, prompts of 64 characters, 128 output tokens, EOS ignored). Each round runs every
variant once, in an order rotated each round, and divides each variant's output tok/s by that
round's ``sglang`` figure; the medians over rounds attribute the gap. The variants change one
difference between the clients at a time:

- ``sglang``: SGLang's benchmark on perfgate's requests, as ``cross_check`` runs it
  (perfgate.serving.sglang_bench: its ``custom`` dataset, a fixed output length).
- ``sglang-random-ids``: SGLang's benchmark on random token ids of the same lengths, as the
  H200 record ran it alone: other prompts, the same client.
- ``perfgate``: perfgate's client, as ``measure_serving`` runs it (one repeat).
- ``perfgate-warmup``: perfgate's client after SGLang's prelude, outside the window: one
  request of the first prompt (at most 32 tokens), then a pause of 1 s.
- ``perfgate-fresh``: perfgate's client on a new TCP connection for every request
  (``run_load(..., keepalive=False)``), as SGLang's client opens an aiohttp session, and so a
  connection, per request.
- ``perfgate-repeats-N``: measure_serving's procedure, N loads back to back, their median (the
  figure a run records; each load's is kept too): SGLang's one run follows them in a run.

Each perfgate load's window is also read SGLang's way (``perfgate`` row, ``window_sglang``:
with the ``GET /server_info`` that SGLang's benchmark times after its last request), and every
client's output token count is kept, to check that both count the same tokens.

With ``--base-url`` it measures a running server instead (SGLang's, started by ``perfgate
servers`` on a GPU machine). Writes the samples to --out (JSON) and prints the table of median
ratios. perfgate from the checkout (run from its root); SGLang's benchmark from
--sglang-python, offline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from perfgate.config import Scenario
from perfgate.engines.launch import Server, probed_command, start_server
from perfgate.engines.server_commands import Mode
from perfgate.errors import PerfgateError
from perfgate.prompts import load_prompt_set
from perfgate.serving.figures import summarize_load
from perfgate.serving.generator import LoadRun, run_load
from perfgate.serving.load import LoadRequest, ServingLoad, build_requests
from perfgate.serving.sglang_bench import bench_command, run_bench

# perfgate/llama-tiny and its EAGLE-3 head (steps 3, topk 1, 4 draft tokens), at most 8
# running requests, one torch thread.
SCENARIO = Scenario(
    name="serving-client-gap",
    engine="embedded",
    model="perfgate/llama-tiny",
    draft="perfgate/eagle3-llama-tiny",
    max_running_requests=8,
    extra_args=("--num-threads", "1"),
)
TIMEOUT_S = 600.0

Figures = dict[str, float]
Variant = Callable[[str, ServingLoad, Sequence[LoadRequest]], Figures]


def embedded_server(mode: Mode, workdir: Path) -> Server:
    """The embedded server of SCENARIO in `mode` on a free port, the probe off, as a gate run
    launches it; its log in `workdir`."""
    command = probed_command(SCENARIO, mode, None, None)
    try:
        return start_server(command, workdir / "server.log", TIMEOUT_S)
    except PerfgateError as error:  # it did not start: why, and its log
        raise SystemExit(f"serving_client_gap: {error}") from None


def _figures(run: LoadRun, extra_s: float = 0.0) -> Figures:
    summary = summarize_load(run)
    tokens = sum(t.output_tokens for t in run.timings)
    return {
        "tok_s": summary["serving_output_tok_s"],
        "tokens": float(tokens),
        "duration_s": run.duration_s,
        "window_sglang_tok_s": tokens / (run.duration_s + extra_s),
        "ttft_ms_p50": summary["ttft_ms_p50"],
        "itl_ms_p50": summary["itl_ms_p50"],
    }


def perfgate_plain(url: str, load: ServingLoad, requests: Sequence[LoadRequest]) -> Figures:
    """perfgate's client as measure_serving runs it, and its window read SGLang's way: with the
    ``GET /server_info`` that SGLang's benchmark sends after its last request, inside its
    window."""
    run = run_load(url, load, requests, TIMEOUT_S)
    started = time.perf_counter()
    httpx.get(url + "/server_info", timeout=30).raise_for_status()
    return _figures(run, time.perf_counter() - started)


def perfgate_warmup(url: str, load: ServingLoad, requests: Sequence[LoadRequest]) -> Figures:
    """SGLang's prelude (benchmark/serving.py, ``benchmark``): one warm-up request of the first
    prompt, at most 32 tokens, then ``time.sleep(1.0)``; then the load, timed as perfgate
    times it."""
    first = requests[0]
    warm = LoadRequest(first.prompt, min(first.max_new_tokens, 32))
    run_load(url, ServingLoad(num_prompts=1), [warm], TIMEOUT_S)
    time.sleep(1.0)
    return _figures(run_load(url, load, requests, TIMEOUT_S))


def perfgate_repeats(count: int) -> Variant:
    """measure_serving's procedure: `count` loads back to back, their median (the figure a run
    records); each load's figure is kept too, in sending order."""

    def run(url: str, load: ServingLoad, requests: Sequence[LoadRequest]) -> Figures:
        loads = [_figures(run_load(url, load, requests, TIMEOUT_S)) for _ in range(count)]
        figures = {key: statistics.median(f[key] for f in loads) for key in loads[0]}
        return figures | {f"tok_s_{i + 1}": f["tok_s"] for i, f in enumerate(loads)}

    return run


def perfgate_fresh(url: str, load: ServingLoad, requests: Sequence[LoadRequest]) -> Figures:
    """perfgate's load on a new TCP connection for every request (SGLang's client opens an
    aiohttp session, and so a connection, per request): perfgate's client, no keep-alive."""
    return _figures(run_load(url, load, requests, TIMEOUT_S, keepalive=False))


def sglang_variant(python: str, workdir: Path, random_ids: bool) -> Variant:
    def run(url: str, load: ServingLoad, requests: Sequence[LoadRequest]) -> Figures:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        command = bench_command(python, url, load, requests, workdir, env)
        if random_ids:
            argv = list(command.argv)
            at = argv.index("--dataset-name")
            del argv[at : at + 4]  # the custom dataset and its path
            argv += ["--dataset-name", "random-ids", "--random-input-len", str(load.input_len)]
            argv += ["--random-output-len", str(load.output_len), "--random-range-ratio", "1"]
            command = type(command)(tuple(argv), command.env, command.output_file, command.dataset)
        figures = run_bench(command, requests, TIMEOUT_S)
        result: dict[str, Any] = json.loads(command.output_file.read_text().splitlines()[-1])
        return {
            "tok_s": figures["sglang_output_tok_s"],
            "tokens": float(result["total_output_tokens"]),
            "tokens_retokenized": float(result["total_output_tokens_retokenized"]),
            "duration_s": float(result["duration"]),
            "ttft_ms_p50": figures["sglang_ttft_ms_p50"],
            "itl_ms_p50": figures["sglang_itl_ms_p50"],
            "concurrency": float(result["concurrency"]),
            "accept_length": float(result.get("accept_length") or 0.0),
        }

    return run


def median_ratios(rounds: Sequence[dict[str, Figures]], key: str = "tok_s") -> dict[str, float]:
    names = rounds[0].keys()
    return {
        name: statistics.median(r[name][key] / r["sglang"]["tok_s"] for r in rounds)
        for name in names
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sglang-python", required=True, help="an interpreter with SGLang")
    parser.add_argument("--mode", choices=("spec", "plain"), default="spec")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--max-concurrency", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="loads of perfgate-repeats-N")
    parser.add_argument(
        "--base-url", help="a running server (SGLang's on a GPU) instead of an embedded one"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="serving-client-gap-"))  # datasets, logs
    load = ServingLoad(
        num_prompts=args.num_prompts,
        max_concurrency=args.max_concurrency,
        input_len=64,
        output_len=args.output_len,
    )
    requests = build_requests(load, load_prompt_set("default"), args.output_len)
    variants: dict[str, Variant] = {
        "sglang": sglang_variant(args.sglang_python, workdir, random_ids=False),
        "sglang-random-ids": sglang_variant(args.sglang_python, workdir, random_ids=True),
        "perfgate": perfgate_plain,
        "perfgate-warmup": perfgate_warmup,
        "perfgate-fresh": perfgate_fresh,
        f"perfgate-repeats-{args.repeats}": perfgate_repeats(args.repeats),
    }
    names = list(variants)
    server = None if args.base_url else embedded_server(args.mode, workdir)
    url = server.base_url if server is not None else args.base_url
    rounds: list[dict[str, Figures]] = []
    try:
        run_load(url, load, requests, TIMEOUT_S)  # one untimed load: the server warms up
        for index in range(args.rounds):
            order = names[index % len(names) :] + names[: index % len(names)]
            figures = {name: variants[name](url, load, requests) for name in order}
            rounds.append({name: figures[name] for name in names})
            line = "  ".join(f"{name} {figures[name]['tok_s']:.1f}" for name in names)
            print(f"round {index + 1}: {line}", flush=True)
            args.out.write_text(json.dumps({"rounds": rounds}, indent=1) + "\n")  # so far
    finally:
        if server is not None:
            server.stop()
    ratios = median_ratios(rounds)
    window = median_ratios(
        [{**r, "perfgate": {"tok_s": r["perfgate"]["window_sglang_tok_s"]}} for r in rounds]
    )
    record = {
        "mode": args.mode,
        "load": load.__dict__,
        "rounds": rounds,
        "median_ratio_to_sglang": ratios,
        "median_ratio_to_sglang_perfgate_window_sglang": window["perfgate"],
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\n{args.mode}: output tok/s over the same round's sglang, median of {len(rounds)}")
    print("| variant | ratio | tok/s (median) | tokens | TTFT p50 ms | ITL p50 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        column = [r[name] for r in rounds]

        def med(key: str, column: list[Figures] = column) -> float:
            return statistics.median(f[key] for f in column)

        print(
            f"| {name} | {ratios[name]:.3f} | {med('tok_s'):.1f} | {med('tokens'):.0f} | "
            f"{med('ttft_ms_p50'):.1f} | {med('itl_ms_p50'):.2f} |"
        )
    print(f"perfgate, its window read SGLang's way: {window['perfgate']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
