#!/usr/bin/env bash
# A real SGLang server under perfgate on one H200: SGLang 0.5.16, perfgate's exported tiny
# pair, from a clean checkout, over a few device calls.
#
#   python benchmarks/sglang_stage.py download && python benchmarks/sglang_stage.py pack  # here
#   benchmarks/sglang_live.sh OUTDIR [STAGE...]            # there (default: every stage below
#                                                          #   after receive)
#   benchmarks/sglang_live.sh --dry-run OUTDIR [STAGE...]  # print each step, run none
#
# Stages:
#   receive    check the staged parts that have arrived (.cache/sglang-live/parts/NN, and
#              .cache/sglang-graphs/parts/NN where the graph set travels; one or two carried
#              per call: a call carries 64 MiB with the working tree);
#   install    join the parts, check them and install every wheel into STATE/site (pip
#              --no-index --no-deps --target), then import sglang, sgl_kernel and flashinfer
#              and record their versions (versions.json; a failed import is named there);
#   export     `perfgate embedded export` of perfgate/llama-tiny and its EAGLE-3 head into
#              .perfgate/export/, where scenario sglang-tiny-eagle3 reads them;
#   reference  `perfgate servers --dry-run` (the twin command lines), then `perfgate run
#              --scenario sglang-tiny-eagle3`: no baseline on the machine, so it is recorded
#              as the local reference (exit 0), with every import of every process recorded
#              (benchmarks/sglang_closure.py: closure.md, closure.json);
#   judged     the same run again, judged against the first (exit 0 expected);
#   overhead   benchmarks/probe_overhead.py --how launches: tok/s with the probe over without,
#              in fresh launches whose order alternates;
#   metrics    a run with `engine_metrics = true`: SGLang's device timer beside the probe;
#   clients    a run under a serving load that SGLang's own sglang.benchmark.serving
#              cross-checks; then each server alone (`perfgate servers`) with
#              sglang.bench_one_batch_server and sglang.benchmark.serving against it;
#   badinput   a draft whose config says 256 wide: perfgate refuses it before launch (exit 64,
#              nothing recorded), and SGLang given it directly says why in its own words; a
#              draft whose weights do not fit its config: SGLang dies loading it, and perfgate
#              says so with SGLang's message (64 or 69), recording nothing;
#   graphs     install the graph set (sglang_stage.py --set graphs: deep_gemm, cutlass-dsl,
#              protobuf 6) over the staged install and record what imports, then a run of
#              the scenario with CUDA graphs on both twins (-graphs: no --disable-cuda-graph),
#              not gated, into its own history;
#   series     one more fresh launch of the graphs variant (`perfgate run --no-gate`; name the
#              stage once per launch wanted), then benchmarks/launch_noise.py over every
#              graphs launch so far: how far tok/s, speedup and the phases scatter between
#              launches with graphs on (graphs-noise.md);
#   gap        perfgate's serving client beside SGLang's sglang.benchmark.serving against one
#              graphs server (`perfgate servers --mode spec`, then --mode plain):
#              benchmarks/serving_client_gap.py --base-url, GAP_ROUNDS (3) rounds each, which
#              says where perfgate's serving tok/s parts from SGLang's on the GPU;
#   record     OUTDIR/sglang-live.md: every step's command and exit code so far, the
#              versions, the twin command lines, both runs' phases, equivalence, accept
#              length and tok/s, the probe's cost, the device-timer cross-check, SGLang's own
#              benchmarks, the bad input and the import closure, paths written as names.
#              Every call ends with it, so a session whose device time runs out keeps what ran.
#
# The device calls, back to back (a machine stays warm 30 s after a call; what a call leaves
# in ignored folders is there for the next only while it is warm), each with one part carried:
#   1. benchmarks/sglang_live.sh OUT receive                  carry .cache/sglang-live/parts/01
#   2. benchmarks/sglang_live.sh OUT receive                  carry .cache/sglang-live/parts/02
#   3. benchmarks/sglang_live.sh OUT receive install export reference judged
#                                                             carry .cache/sglang-live/parts/03
#      (492-515 s on an H200: each SGLang server 44-62 s to healthy, 2 min on a cold Triton
#      cache)
#   4. benchmarks/sglang_live.sh OUT badinput                 (158 s)
#   5. benchmarks/sglang_live.sh OUT clients                  (290 s when its clients failed)
#   6. benchmarks/sglang_live.sh OUT overhead                 (234 s)
#   7. benchmarks/sglang_live.sh OUT metrics                  (172 s)
#   CUDA graphs: `download --set graphs` and `pack --set graphs` here, then before call 3
#   calls with `receive` carrying .cache/sglang-graphs/parts/01, then parts/02 and 03 in one,
#   and after call 3: benchmarks/sglang_live.sh OUT graphs
# (each step's time limit keeps a call inside the tool's 10 minutes). State kept between
# calls (the staged parts, the install, the history, the pieces of the record) lives in
# .cache/sglang-live/ of the checkout (STATE and STAGED move it); the exported models in
# .perfgate/export/ of the folder the runs start in, WORK (default: the checkout; the
# scenario's paths are taken from there). Every step's command, exit code and seconds go to
# STATE/summary.md, whatever happens; OUTDIR gets run.log, summary.md, sglang-live.md and
# closure.json. NCCL's multicast stays off in every process (NCCL_NVLS_ENABLE=0). Exit code:
# 0 when every step ended as expected, 1 otherwise, 64 on a bad stage name.
set -u -o pipefail

dry=0
if [[ "${1:-}" == "--dry-run" ]]; then
  dry=1
  shift
fi
if [[ $# -lt 1 ]]; then
  echo "usage: $0 [--dry-run] OUTDIR [receive] [install] [export] [reference] [judged]" \
    "[overhead] [metrics] [clients] [badinput] [graphs] [series] [gap] [record]" >&2
  exit 64
fi
out=$1
shift
all="receive install export reference judged overhead metrics clients badinput graphs series gap record"
if [[ $# -eq 0 ]]; then
  read -ra every <<< "${all#receive }"
  set -- "${every[@]}"
fi
# shellcheck source=stages.sh source-path=SCRIPTDIR
source "$(dirname "$0")/stages.sh"
# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
check_stages "$all" "$@"
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
staged=${STAGED:-$repo/.cache/sglang-live}
graph_staged=${GRAPH_STAGED:-$repo/.cache/sglang-graphs}
state=${STATE:-$staged/state}
site=$state/site
record=$state/record
mkdir -p "$out" "$state" "$record"
out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# perfgate from the checkout, its pytest plugin named where perfgate is not installed
# (record.sh), and the staged install ahead of it (SGLang's transformers 5.12.1 before the
# image's 5.17).
use_checkout
export PYTHONPATH="$site:$PYTHONPATH"
work=${WORK:-$repo}
mkdir -p "$work"
work=$(cd "$work" && pwd)
exec > >(tee "$out/run.log") 2>&1
cd "$work" || exit 1

scenario=sglang-tiny-eagle3
config=$repo/perfgate.toml
variants=$state/perfgate.toml
db_file=$state/history.db
db="sqlite:///$db_file"
paths=(--db "$db" --baselines "$state/baselines" --report "$state/report.html")
pg=("$python" -m perfgate)
live=("$python" "$repo/benchmarks/sglang_live.py")
stage=("$python" "$repo/benchmarks/sglang_stage.py")
closure=("$python" "$repo/benchmarks/sglang_closure.py")
hidden=$state hidden_as=STATE
summary=$state/summary.md
failed=0
if [[ ! -f $summary ]]; then
  {
    echo "# SGLang live under perfgate: $(date -u +%FT%TZ)"
    echo
    echo '```'
    nvidia-smi -L 2> /dev/null || echo "no nvidia-smi"
    [[ $dry -eq 1 ]] || "$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
    git -C "$repo" log -1 --format='perfgate %h %s' 2> /dev/null || echo "perfgate: no git"
    echo '```'
    echo
    echo "| step | exit | expected | seconds | command |"
    echo "| --- | ---: | ---: | ---: | --- |"
  } > "$summary"
fi

# run NAME EXPECTED SECONDS COMMAND...: `step` (stages.sh), or with --dry-run only say it.
run() {
  if [[ $dry -eq 1 ]]; then
    local name=$1 want=$2
    shift 3
    echo "== would run $name (expect $want): $*"
    return 0
  fi
  step "$@"
}

# capture FILE NAME EXPECTED SECONDS COMMAND...: run, its output also to STATE/record/FILE.
capture() {
  local file=$1
  shift
  local name=$1 want=$2 seconds=$3
  shift 3
  run "$name" "$want" "$seconds" "${live[@]}" capture "$record/$file" -- "$@"
}

stage_receive() {
  local part found=0
  for part in "$staged"/parts/*/ "$graph_staged"/parts/*/; do
    [[ -d $part ]] || continue
    found=1
    run "receive $(basename "$(dirname "$(dirname "$part")")") $(basename "$part")" 0 120 \
      "${stage[@]}" check "$part"
  done
  [[ $found -eq 1 || $dry -eq 1 ]] || { echo "no staged part under $staged/parts"; failed=1; }
}

stage_install() {
  run "install" 0 300 "${stage[@]}" assemble "$site" --dest "$staged"
  run "versions" 0 300 "${live[@]}" versions "$record/versions.json"
}

stage_export() {
  local name
  for name in llama-tiny eagle3-llama-tiny; do
    run "export $name" 0 300 "${pg[@]}" embedded export "perfgate/$name" \
      ".perfgate/export/$name" --force
  done
}

stage_reference() {
  capture commands.txt "twin command lines" 0 120 "${pg[@]}" servers --dry-run \
    --config "$config" --scenario "$scenario"
  run "closure hook" 0 60 "${closure[@]}" hook "$state/hook"
  capture reference.txt "reference run" 0 540 env IMPORT_CLOSURE_LOG="$state/imports" \
    PYTHONPATH="$state/hook:$PYTHONPATH" "${pg[@]}" run --config "$config" \
    --scenario "$scenario" "${paths[@]}"
  run "reference as recorded" 0 120 "${live[@]}" history "$db_file" "$scenario" \
    "$record/reference-run.txt"
  run "closure" 0 300 "${closure[@]}" report "$state/imports" \
    --site "$site" --json "$record/closure.json" --md "$record/closure.md"
}

stage_judged() {
  capture judged.txt "judged run" 0 540 "${pg[@]}" run --config "$config" \
    --scenario "$scenario" "${paths[@]}"
  run "judged as recorded" 0 120 "${live[@]}" history "$db_file" "$scenario" \
    "$record/judged-run.txt"
}

stage_overhead() {
  run "probe overhead" 0 560 "$python" "$repo/benchmarks/probe_overhead.py" \
    --config "$config" --scenario "$scenario" --how launches --pairs 2 --budget-s 300 --out "$state/overhead" \
    --workdir "$state/overhead-work"
  [[ $dry -eq 1 ]] || cp "$state/overhead/probe-overhead.md" "$record/overhead.md" 2> /dev/null
}

variant_config() {
  local kind
  for kind in bad broken; do
    run "$kind draft" 0 120 "${live[@]}" "$kind-draft" .perfgate/export/eagle3-llama-tiny \
      "$state/$kind-draft"
  done
  run "variants" 0 60 "${live[@]}" variants "$config" "$variants" \
    --bad-draft "$state/bad-draft" --broken-draft "$state/broken-draft"
}

# variants_once: the variant config, unless an earlier call on this machine wrote it.
variants_once() {
  [[ -f $variants || $dry -eq 1 ]] || variant_config
}

stage_metrics() {
  variant_config
  capture metrics.txt "engine metrics run" 0 540 "${pg[@]}" run --no-gate --config \
    "$variants" --scenario "$scenario-metrics" "${paths[@]}"
  run "metrics as recorded" 0 120 "${live[@]}" history "$db_file" "$scenario-metrics" \
    "$record/metrics-run.txt"
}

# stop_server PID: SIGTERM to `perfgate servers` (a background job of this shell ignores
# SIGINT), which ends its server's processes; SIGKILL after 120 s (its supervisor still ends
# them).
stop_server() {
  local pid=$1 waited=0
  kill -TERM "$pid" 2> /dev/null
  while kill -0 "$pid" 2> /dev/null && [[ $waited -lt 120 ]]; do
    sleep 1
    waited=$((waited + 1))
  done
  kill -KILL "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
}

# serve MODE SCENARIO CONFIG: one server of the scenario up (`perfgate servers`, in the
# background: its pid in server_pid, its address in url, empty when it did not come up).
serve() {
  local mode=$1 scenario_name=$2 config_file=$3 log=$record/server-$1-$2.txt waited=0
  url="" server_pid=""
  if [[ $dry -eq 1 ]]; then
    echo "== would start: ${pg[*]} servers --config $config_file --scenario $scenario_name --mode $mode"
    url=http://127.0.0.1:PORT
    return
  fi
  "${pg[@]}" servers --config "$config_file" --scenario "$scenario_name" --mode "$mode" \
    > "$log" 2>&1 &
  server_pid=$!
  while [[ -z $url && $waited -lt 600 ]] && kill -0 "$server_pid" 2> /dev/null; do
    sleep 2
    waited=$((waited + 2))
    url=$(sed -n 's/.* is up at \(http[^;]*\);.*/\1/p' "$log" | head -1)
  done
  echo "| $mode server of $scenario_name | ${url:+up} | up | $waited | \`perfgate servers --scenario $scenario_name --mode $mode\` |" >> "$summary"
  if [[ -z $url ]]; then
    echo "== the $mode server did not come up; its log:" && tail -40 "$log"
    failed=1
    stop_server "$server_pid"
    server_pid=""
  fi
}

# serve_and_bench MODE: one server of the scenario up, SGLang's own clients against it, then
# the server stopped.
serve_and_bench() {
  local mode=$1
  serve "$mode" "$scenario" "$config"
  [[ -n $url ]] || return
  capture "one-batch-$mode.txt" "bench_one_batch_server ($mode)" 0 300 "$python" -m \
    sglang.bench_one_batch_server --model-path .perfgate/export/llama-tiny --base-url "$url" \
    --batch-size 1 8 --input-len 64 --output-len 128 --dataset-name random-ids \
    --result-filename "$record/one-batch-$mode.jsonl" --no-append-to-github-summary
  capture "serving-$mode.txt" "benchmark.serving ($mode)" 0 300 "$python" -m \
    sglang.benchmark.serving --backend sglang --base-url "$url" --dataset-name random-ids \
    --random-input-len 64 --random-output-len 128 --random-range-ratio 1 --num-prompts 64 \
    --max-concurrency 8 --request-rate inf --seed 1 --tokenizer .perfgate/export/llama-tiny \
    --output-file "$record/serving-$mode.jsonl"
  [[ -z $server_pid ]] || stop_server "$server_pid"
}

stage_clients() {
  variants_once
  capture serving.txt "serving run with SGLang's benchmark" 0 540 "${pg[@]}" run --no-gate \
    --config "$variants" --scenario "$scenario-serving" "${paths[@]}"
  run "serving as recorded" 0 120 "${live[@]}" history "$db_file" "$scenario-serving" \
    "$record/serving-run.txt"
  serve_and_bench spec
  serve_and_bench plain
}

stage_badinput() {
  variants_once
  local before
  before=$("${live[@]}" runs "$db_file" 2> /dev/null)
  capture bad-preflight.txt "bad input: perfgate's preflight" 64 300 "${pg[@]}" run \
    --config "$variants" --scenario "$scenario-bad" "${paths[@]}"
  [[ $dry -eq 1 ]] || echo "runs in the history: $before before, $("${live[@]}" runs "$db_file") after" \
    > "$record/bad-runs.txt"
  # SGLang's own word on it: the speculative command line, with the bad draft.
  capture bad-sglang.txt "bad input: SGLang itself" '[1-9][0-9]*' 240 "$python" -m \
    sglang.launch_server --model-path .perfgate/export/llama-tiny --dtype bfloat16 \
    --attention-backend triton --disable-cuda-graph --mem-fraction-static 0.3 \
    --max-running-requests 8 --host 127.0.0.1 --port 39631 --speculative-algorithm EAGLE3 \
    --speculative-draft-model-path "$state/bad-draft" --speculative-num-steps 3 \
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
  # A draft that passes the preflight and that SGLang dies loading: under perfgate.
  before=$("${live[@]}" runs "$db_file" 2> /dev/null)
  capture bad-loading.txt "bad input: SGLang dies while loading" '64|69' 300 "${pg[@]}" run \
    --config "$variants" --scenario "$scenario-broken" "${paths[@]}"
  [[ $dry -eq 1 ]] || echo "runs in the history: $before before, $("${live[@]}" runs "$db_file") after" \
    >> "$record/bad-runs.txt"
}

stage_graphs() {
  run "install graph set" 0 300 "${stage[@]}" assemble "$site" --dest "$graph_staged"
  # What imports, recorded, not required (exit 0 whatever fails to): the run below says
  # whether SGLang needed it (cutlass's .pth is not read from a PYTHONPATH folder, and on
  # 2026-12-03 the run passed without it).
  run "graph versions" 0 300 "${live[@]}" versions --graphs "$record/graphs-versions.json"
  variant_config
  run "closure hook" 0 60 "${closure[@]}" hook "$state/hook"
  capture graphs.txt "CUDA graphs run" 0 450 env IMPORT_CLOSURE_LOG="$state/graph-imports" \
    PYTHONPATH="$state/hook:$PYTHONPATH" "${pg[@]}" run --no-gate --config "$variants" \
    --scenario "$scenario-graphs" "${paths[@]}"
  run "graphs as recorded" 0 120 "${live[@]}" history "$db_file" "$scenario-graphs" \
    "$record/graphs-run.txt"
  run "graphs closure" 0 300 "${closure[@]}" report "$state/graph-imports" \
    --site "$site" --json "$record/graphs-closure.json" --md "$record/graphs-closure.md"
}

stage_series() {
  variants_once
  capture series.txt "graphs launch" 0 450 "${pg[@]}" run --no-gate --config "$variants" \
    --scenario "$scenario-graphs" "${paths[@]}"
  capture graphs-noise.md "graphs launches' noise" 0 120 "$python" \
    "$repo/benchmarks/launch_noise.py" "$db_file" "$scenario-graphs"
}

stage_gap() {
  variants_once
  local mode
  for mode in spec plain; do
    serve "$mode" "$scenario-graphs" "$variants"
    [[ -n $url ]] || continue
    capture "gap-$mode.txt" "serving clients side by side ($mode)" 0 420 "$python" \
      "$repo/benchmarks/serving_client_gap.py" --base-url "$url" --mode "$mode" \
      --sglang-python "$python" --rounds "${GAP_ROUNDS:-3}" --out "$record/gap-$mode.json"
    [[ -z $server_pid ]] || stop_server "$server_pid"
  done
}

stage_record() {
  local hides=(--hide "$state=STATE")
  [[ $work == "$repo" ]] || hides+=(--hide "$work=WORK")
  run "record" 0 120 "${live[@]}" record "$state" "$out/sglang-live.md" "${hides[@]}" \
    --hide "$repo=."
  # The closure names every imported file by its path: written with names, as the record is.
  local replaces=(--replace "$state=STATE")
  [[ $work == "$repo" ]] || replaces+=(--replace "$work=WORK")
  [[ $dry -eq 1 ]] || { cp "$record/closure.json" "$out/" 2> /dev/null &&
    run "closure paths" 0 60 "$python" "$repo/benchmarks/portable_paths.py" "${replaces[@]}" \
      "$out/closure.json"; }
}

for stage_name in "$@"; do
  echo "== $(date -u +%FT%TZ) stage $stage_name"
  [[ $stage_name == record ]] && continue # last, below
  case $stage_name in
    receive) stage_receive ;;
    install) stage_install ;;
    export) stage_export ;;
    reference) stage_reference ;;
    judged) stage_judged ;;
    overhead) stage_overhead ;;
    metrics) stage_metrics ;;
    clients) stage_clients ;;
    badinput) stage_badinput ;;
    graphs) stage_graphs ;;
    series) stage_series ;;
    gap) stage_gap ;;
  esac
done
# Every call ends with the record so far: a session whose device time runs out keeps what ran.
stage_record
cp "$summary" "$out/summary.md"
echo "== done: stages $*; failed=$failed"
exit "$failed"
